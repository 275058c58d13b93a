// SPDX-License-Identifier: Apache-2.0
// The high-throughput layout: one block computes, for this rank's tokens, the row each
// token takes among the tokens it sends to every rank (a prefix scan per destination), the
// chunk boundaries the dispatch flags carry, and the entries per expert; it then writes
// each rank its counts (tokens it will receive from here, this rank's B, entries per local
// expert), signals, waits for every rank's counts and derives where each source's rows
// start on this rank, N and the per-expert counts, and applies the receive capacity
// (ht_layout_capacity.cuh). Layouts are rare (once per handle), so
// one block is enough; successive layouts alternate between two window slots because a
// fast peer may start the next layout before a slow one has read this one.
#include <cub/block/block_scan.cuh>

#include "kernels/common/kernel_stack.hpp"
#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/ht/ht_layout_capacity.cuh"
#include "kernels/launch.hpp"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/shared_bytes.hpp"

namespace epc::kernels {

namespace {

constexpr int kLayoutThreads = 1024;
using Scan = cub::BlockScan<int, kLayoutThreads>;

__device__ __forceinline__ bool token_goes_to(const int32_t* topk, int K, int local_experts, int dest) {
  for (int k = 0; k < K; ++k) {
    if (topk[k] >= 0 && topk[k] / local_experts == dest) return true;
  }
  return false;
}

// Fills token_row, chunk_start and `sent[d]` (shared) for every destination.
__device__ void number_rows(const HtCommon& c, int* sent, Scan::TempStorage& scan) {
  const HtGeometry& g = c.geo;
  const int B = c.num_tokens, R = g.nranks, K = g.topk;
  const int per_thread = (B + blockDim.x - 1) / blockDim.x;
  const int first = min(B, static_cast<int>(threadIdx.x) * per_thread);
  const int last = min(B, first + per_thread);
  for (int d = 0; d < R; ++d) {
    int mine = 0;
    for (int t = first; t < last; ++t) mine += token_goes_to(c.handle.topk_idx + t * K, K, g.local_experts, d);
    int row = 0, total = 0;
    Scan(scan).ExclusiveSum(mine, row, total);
    for (int t = first; t < last; ++t) {
      if (t % kHtChunkTokens == 0) c.handle.chunk_start[(t / kHtChunkTokens) * R + d] = row;
      const bool goes = token_goes_to(c.handle.topk_idx + t * K, K, g.local_experts, d);
      c.handle.token_row[static_cast<size_t>(t) * R + d] = goes ? row++ : -1;
    }
    if (threadIdx.x == 0) {
      c.handle.chunk_start[ht_chunks(B) * R + d] = total;
      sent[d] = total;
    }
    __syncthreads();  // the scan storage is reused
  }
}

__device__ void count_entries(const HtCommon& c) {
  const HtGeometry& g = c.geo;
  for (int e = threadIdx.x; e < g.num_experts; e += blockDim.x) c.handle.entry_counts[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < c.num_tokens * g.topk; i += blockDim.x) {
    const int expert = c.handle.topk_idx[i];
    if (expert >= 0) atomicAdd(&c.handle.entry_counts[expert], 1);
  }
  __syncthreads();
}

// EXPERT_PACKED: zone l takes its entries rounded up to the alignment (one thread).
__device__ void zone_offsets(const HtCommon& c, int alignment) {
  int offset = 0;
  for (int l = 0; l < c.geo.local_experts; ++l) {
    c.handle.expert_offsets[l] = offset;
    offset += (c.handle.expert_counts[l] + alignment - 1) / alignment * alignment;
  }
  c.handle.expert_offsets[c.geo.local_experts] = offset;
}

// EXPERT_PACKED: where source s's rows of local expert l start (sources ascending in each
// zone), and where its entries of expert l start among its entries for this rank.
__device__ void source_bases(const HtCommon& c, const volatile int32_t* received, int words) {
  const int L = c.geo.local_experts, R = c.geo.nranks;
  for (int l = threadIdx.x; l < L; l += blockDim.x) {
    int base = c.handle.expert_offsets[l];
    for (int s = 0; s < R; ++s) {
      c.handle.expert_base[s * L + l] = base;
      base += received[s * words + kHtLayoutHeaderWords + l];
    }
  }
  for (int s = threadIdx.x; s < R; s += blockDim.x) {
    int start = 0;
    for (int l = 0; l < L; ++l) {
      c.handle.source_starts[s * (L + 1) + l] = start;
      start += received[s * words + kHtLayoutHeaderWords + l];
    }
    c.handle.source_starts[s * (L + 1) + L] = start;
  }
}

// Word w of what this rank writes into rank dest's slot (ht_capacity.hpp).
__device__ __forceinline__ int layout_word(const HtLayoutParams& p, const int* sent, int dest, int w) {
  const HtCommon& c = p.common;
  const int L = c.geo.local_experts;
  if (w == 0) return sent[dest];
  if (w == 1) return c.num_tokens;
  if (w < ht_layout_limit_word(L)) return c.handle.entry_counts[dest * L + w - 2];
  if (w == ht_layout_limit_word(L)) return p.row_limit;
  return sent[w - ht_layout_count_word(L, 0)];
}

__global__ void __launch_bounds__(kLayoutThreads) ht_layout_kernel(HtLayoutParams p) {
  extern __shared__ int sent[];  // [R], then [R]: how many of them each rank keeps
  __shared__ Scan::TempStorage scan;
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int R = g.nranks, L = g.local_experts;
  const int words = ht_layout_words(R, L);
  int* keep = sent + R;
  const uint64_t step = c.state->layout_step;
  const uint64_t slot = p.slot_offset[step & 1];

  count_entries(c);
  number_rows(c, sent, scan);

  // This rank's words in every rank's slot, then one release signal per rank.
  for (int i = threadIdx.x; i < R * words; i += blockDim.x) {
    const int dest = i / words, w = i % words;
    const uint64_t offset = slot + p.words_offset + (static_cast<uint64_t>(g.rank) * words + w) * sizeof(int32_t);
    *static_cast<int32_t*>(c.transport.buffer(offset, dest)) = layout_word(p, sent, dest, w);
  }
  __syncthreads();
  const uint64_t mine = static_cast<uint64_t>(g.rank) * words * sizeof(int32_t);
  for (int d = 0; d < R; ++d) {
    c.transport.commit(slot + p.words_offset + mine, words * sizeof(int32_t), d, threadIdx.x, blockDim.x);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    for (int d = 0; d < R; ++d) c.transport.signal(ht_ack_word(slot, g.rank), d, step + 1);
  }
  if (!wait_for_every_peer_signal(c.transport, slot, R, AtLeast{step + 1}, nullptr, c.timeout_ns, c.error,
                                  kPhaseHtLayout, g.rank)) {
    return;  // the step counter stays: the group is failed and every later call says so
  }

  const auto* received = static_cast<const volatile int32_t*>(c.transport.local(slot + p.words_offset));
  for (int s = threadIdx.x; s < R; s += blockDim.x) {
    c.handle.recv_count[s] = received[s * words];
    c.handle.source_tokens[s] = received[s * words + 1];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int base = 0;
    for (int s = 0; s < R; ++s) {
      c.handle.recv_base[s] = base;
      base += c.handle.recv_count[s];
    }
    c.handle.recv_base[R] = base;
  }
  __syncthreads();
  if (ht_layout_capacity::apply(p, received, words, sent, keep) && !p.fail_on_overflow) {
    // Some rank drops rows: count the entries of the rows kept (every rank takes this
    // branch alike, from the same counts).
    if (!ht_layout_capacity::exchange_kept_counts(p, slot, step)) return;
  } else {
    for (int l = threadIdx.x; l < L; l += blockDim.x) {
      int sum = 0;
      for (int s = 0; s < R; ++s) sum += received[s * words + kHtLayoutHeaderWords + l];
      c.handle.expert_counts[l] = sum;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (p.expert_alignment > 0) zone_offsets(c, p.expert_alignment);
    c.state->layout_step = step + 1;
  }
  if (p.expert_alignment > 0) {
    __syncthreads();
    source_bases(c, received, words);
  }
}

}  // namespace

cudaError_t launch_ht_layout(const HtLayoutParams& params, cudaStream_t stream) {
  const size_t shared = ht_layout_shared_bytes(params.common.geo.nranks);
  ht_layout_kernel<<<1, kLayoutThreads, shared, stream>>>(params);
  return cudaGetLastError();
}

size_t ht_layout_local_bytes() { return max_local_bytes(ht_layout_kernel); }

}  // namespace epc::kernels
