// SPDX-License-Identifier: Apache-2.0
// The layout's capacity part (kernels/wire/ht_capacity.hpp): from every source's counts for
// every rank and every rank's row limit, which this rank's rows each rank keeps, which rows
// this rank keeps from each source, the dispatch slots (across nodes also those this rank
// forwards into), and the overflow every rank reports alike. Where some rank drops rows
// under EPC_OVERFLOW_DROP, a second exchange gives every rank the entries per local expert
// of the rows it keeps.
#pragma once

#include "kernels/device/signal_wait.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ht_capacity.hpp"
#include "kernels/wire/ht_params.hpp"

namespace epc::kernels::ht_layout_capacity {

// Source s's token count for rank d, from the words s wrote into this rank's slot.
struct ReceivedCounts {
  const volatile int32_t* received;
  int words;
  int local_experts;
  __host__ __device__ int operator()(int s, int d) const {
    return received[s * words + ht_layout_count_word(local_experts, d)];
  }
};

// Needs recv_base (before any drop) and recv_count (counts as sent) written. `sent`: this
// rank's tokens per rank; `keep` (shared, [R]) receives how many of them each rank keeps.
// Returns, to every thread, whether some rank's receive overflows.
__device__ __forceinline__ bool apply(const HtLayoutParams& p, const volatile int32_t* received, int words,
                                      const int* sent, int* keep) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int R = g.nranks, L = g.local_experts, me = g.rank;
  const ReceivedCounts count{received, words, L};
  __shared__ int lowest;  // the lowest rank whose receive overflows, R for none
  if (threadIdx.x == 0) lowest = R;
  __syncthreads();
  for (int d = threadIdx.x; d < R; d += blockDim.x) {
    int first, total;
    ht_rows_at(count, R, me, d, &first, &total);
    const int limit = received[d * words + ht_layout_limit_word(L)];
    keep[d] = ht_kept_rows(first, sent[d], limit);
    c.handle.send_slot[d] = p.compact_window ? first : me * g.max_tokens;
    if (total > limit) atomicMin(&lowest, d);
  }
  for (int s = threadIdx.x; s < R; s += blockDim.x) {
    const int base = c.handle.recv_base[s];
    c.handle.recv_count[s] = ht_kept_rows(base, c.handle.recv_count[s], p.row_limit);
    c.handle.recv_slot[s] = p.compact_window ? base : s * g.max_tokens;
  }
  // Across nodes: where this rank, forwarding for its rail peer in node m, writes in the
  // window of rank i of its node, as that rank's recv_slot says (ht_forward_slot).
  for (int k = threadIdx.x; g.num_nodes > 1 && k < g.num_nodes * g.node_size; k += blockDim.x) {
    c.handle.forward_slot[k] =
        ht_forward_slot(count, R, g.node_size, me, k / g.node_size, k % g.node_size, p.compact_window, g.max_tokens);
  }
  __syncthreads();
  const bool overflow = lowest < R;
  if (threadIdx.x == 0) {
    // This rank when its own receive overflows, else the lowest rank whose receive does.
    const int own = c.handle.recv_base[R] - p.row_limit;
    const int rank = own > 0 ? me : (overflow ? lowest : -1);
    int rows = own;
    if (own <= 0 && overflow) {
      int first, total;
      ht_rows_at(count, R, 0, lowest, &first, &total);
      rows = total - received[lowest * words + ht_layout_limit_word(L)];
    }
    c.handle.overflow->skip_steps = overflow && p.fail_on_overflow ? 1 : 0;
    c.handle.overflow->rank = rank;
    c.handle.overflow->rows = rank >= 0 ? rows : 0;
    p.host_record->rank = rank;
    p.host_record->rows = rank >= 0 ? rows : 0;
    __threadfence_system();
    *reinterpret_cast<volatile uint64_t*>(&p.host_record->sequence) = p.sequence;
  }
  if (!overflow) return false;
  // Rows past a rank's limit are never sent: no row number, and chunk ranges cut there.
  const int B = c.num_tokens;
  for (int i = threadIdx.x; i < B * R; i += blockDim.x) {
    if (c.handle.token_row[i] >= keep[i % R]) c.handle.token_row[i] = -1;
  }
  for (int i = threadIdx.x; i < (ht_chunks(B) + 1) * R; i += blockDim.x) {
    c.handle.chunk_start[i] = min(c.handle.chunk_start[i], keep[i % R]);
  }
  __syncthreads();
  return true;
}

// Round two: this rank's entries per expert over the rows that ranks keep, to every rank;
// then expert_counts from what every source kept here. Returns false on a timeout.
__device__ __forceinline__ bool exchange_kept_counts(const HtLayoutParams& p, uint64_t slot, uint64_t step) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int R = g.nranks, L = g.local_experts, K = g.topk;
  for (int e = threadIdx.x; e < g.num_experts; e += blockDim.x) c.handle.entry_counts[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < c.num_tokens * K; i += blockDim.x) {
    const int expert = c.handle.topk_idx[i];
    if (expert >= 0 && c.handle.token_row[(i / K) * R + expert / L] >= 0) atomicAdd(&c.handle.entry_counts[expert], 1);
  }
  __syncthreads();
  const uint64_t words = slot + p.round2_words_offset;
  for (int i = threadIdx.x; i < R * L; i += blockDim.x) {
    const int dest = i / L, l = i % L;
    const uint64_t offset = words + (static_cast<uint64_t>(g.rank) * L + l) * sizeof(int32_t);
    *static_cast<int32_t*>(c.transport.buffer(offset, dest)) = c.handle.entry_counts[i];
  }
  __syncthreads();
  const uint64_t mine = words + static_cast<uint64_t>(g.rank) * L * sizeof(int32_t);
  for (int d = 0; d < R; ++d) c.transport.commit(mine, L * sizeof(int32_t), d, threadIdx.x, blockDim.x);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    for (int d = 0; d < R; ++d) c.transport.signal(ht_ack_word(slot + p.round2_signals, g.rank), d, step + 1);
  }
  if (!wait_for_every_peer_signal(c.transport, slot + p.round2_signals, R, AtLeast{step + 1}, nullptr, c.timeout_ns,
                                  c.error, kPhaseHtLayout, g.rank)) {
    return false;
  }
  const auto* kept = static_cast<const volatile int32_t*>(c.transport.local(words));
  for (int l = threadIdx.x; l < L; l += blockDim.x) {
    int sum = 0;
    for (int s = 0; s < R; ++s) sum += kept[s * L + l];
    c.handle.expert_counts[l] = sum;
  }
  return true;
}

}  // namespace epc::kernels::ht_layout_capacity
