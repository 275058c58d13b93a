// SPDX-License-Identifier: Apache-2.0
// Low-latency combine with EPC_WEIGHTING_HOME (groups with EPC_GROUP_COMBINE_PER_ENTRY): the
// two halves ll_combine_parts.cuh runs in place of the partial sums. Send: every entry j of a
// received message (source s, index i among its messages here) returns its expert's row
// unweighted into s's combine slot at [this rank][i][j] (LlGeometry::entry_row_offset), j
// being the entry's index among the token's entries on this rank in top-k order, as the
// dispatch sender numbered them (ll_token_routing.cuh index_on_rank). Receive: the token's
// rank walks its top-k slots in order, finds each unmasked entry's row from its expert's rank
// d, the token's message index there (ll_message_index.cuh) and the entry's index on d, and
// sums home_weights[t][k] x row in fp32 (warp_sum_bf16_rows, product rounded first), rounded
// once to out's dtype: the reference model's ll_combine_home. A fused launch's own entries'
// rows are read where they are, in the expert outputs (ll_step_kernel.cuh).
#pragma once

#include "kernels/device/bf16_row_sum.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/ll/ll_message_index.cuh"
#include "kernels/ll/ll_own_messages.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ll_params.hpp"

namespace epc::kernels::combine {

// Makes vectors [part.begin, part.end) of a message's `entries` rows, the first at window
// offset `first_row` of `source`'s window, travel to `source` in another node. A whole-row
// slice leaves the rows contiguous, so they go as one put; else one put per row. The whole
// block calls, after its stores and a block barrier.
__device__ __forceinline__ void put_entry_rows(const PeerTransport& transport, uint64_t first_row, int source,
                                               int entries, int row_bytes, VectorSlice part) {
  constexpr uint64_t kVectorBytes = 16;
  const uint64_t begin = part.begin * kVectorBytes, bytes = (part.end - part.begin) * kVectorBytes;
  if (bytes == static_cast<uint64_t>(row_bytes)) {
    if (entries > 0) transport.commit(first_row, bytes * entries, source, threadIdx.x, blockDim.x);
    return;
  }
  for (int j = 0; j < entries; ++j) {
    transport.commit(first_row + static_cast<uint64_t>(j) * row_bytes + begin, bytes, source, threadIdx.x, blockDim.x);
  }
}

// Copies vectors [part.begin, part.end) of each of the message's `entries` rows (flat rows
// `flat_row`, -1 for one dispatch could not place: zeros go, the routing fault is reported
// there) into rank `source`'s combine slot, then commits them. The whole block calls.
__device__ __forceinline__ void send_entry_rows(const LlCombineParams& p, int source, int token, int entries,
                                                const int* flat_row, VectorSlice part) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  const int span = part.end - part.begin;
  // The message's rows lie back to back in the slot, and so in the staging of a source in
  // another node (the staging map stages the writer's [T][max_entries] rows whole,
  // core/staging_plan.cpp): one lookup per message either way.
  int4* first = static_cast<int4*>(c.transport.buffer(g.entry_row_offset(p.recv_offset, g.rank, token, 0), source));
  const int row_vectors = g.row_bytes / 16;
  // The entries' slices share out the block's threads, so a small step keeps its loads in
  // flight. Whole rounds of kCopiesInFlight vectors per thread load them all before storing
  // any (the stores could alias the loads for all the compiler knows, so it would not
  // overlap them by itself); the rest, fewer than that many per thread, one at a time.
  constexpr int kCopiesInFlight = 4;
  const int total = entries * span;
  const int stride = static_cast<int>(blockDim.x);
  struct Copy {
    const int4* from;  // null: a zero vector (an entry dispatch could not place)
    int4* to;
  };
  const auto copy_of = [&](int i) {
    const int j = i / span, v = part.begin + i % span;
    const int row = flat_row[j];
    return Copy{
        row >= 0 ? reinterpret_cast<const int4*>(p.expert_out + static_cast<size_t>(row) * g.hidden) + v : nullptr,
        first + static_cast<size_t>(j) * row_vectors + v};
  };
  const auto load = [](const Copy& c) { return c.from != nullptr ? *c.from : make_int4(0, 0, 0, 0); };
  int i = threadIdx.x;
  for (; i + (kCopiesInFlight - 1) * stride < total; i += kCopiesInFlight * stride) {
    Copy copies[kCopiesInFlight];
    int4 data[kCopiesInFlight];
#pragma unroll
    for (int k = 0; k < kCopiesInFlight; ++k) {
      copies[k] = copy_of(i + k * stride);
      data[k] = load(copies[k]);
    }
#pragma unroll
    for (int k = 0; k < kCopiesInFlight; ++k) *copies[k].to = data[k];
  }
  for (; i < total; i += stride) {
    const Copy c = copy_of(i);
    *c.to = load(c);
  }
  __syncthreads();
  // Inside one node the stores were the delivery: one-node launches leave here, on a branch
  // uniform over the launch, before anything of the puts (their lookups and puts are calls).
  if (c.transport.one_node || span <= 0) return;
  put_entry_rows(c.transport, g.entry_row_offset(p.recv_offset, g.rank, token, 0), source, entries, g.row_bytes, part);
}

// Token t's output from its entries' rows in this rank's combine slot (`rows`, local), and with
// `own` (this rank, or -1) those on `own` from the expert outputs at the rows the dispatch
// recorded (an entry the dispatch could not place, which failed the group, adds nothing), each
// warp of the block a range of the row's vectors. The whole block calls.
__device__ __forceinline__ void sum_home_entries(const LlCombineParams& p, const char* rows, int t, void* out,
                                                 int own) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  const int k = lane_id();
  const int expert = k < c.topk ? c.handle.topk_idx[t * c.topk + k] : -1;
  const int dest = expert >= 0 ? g.rank_of_expert(expert) : -1;
  // The entry's index among the token's entries on its rank: earlier slots on the same rank.
  const int on_rank = __popc(__match_any_sync(0xffffffffu, dest) & ((1u << k) - 1u));
  const float weight = expert >= 0 ? __ldg(p.home_weights + static_cast<size_t>(t) * c.topk + k) : 0.0f;
  int own_row = -1;
  if (own >= 0) {
    const int n = own_message_number(c, t);
    if (expert >= 0 && dest == own) own_row = c.handle.msg_rows[static_cast<size_t>(n) * g.max_entries + on_rank];
  }

  const int vectors = g.hidden / kBf16PerVector;
  const int warps = blockDim.x / kWarpSize;
  const int per_warp = (vectors + warps - 1) / warps;
  const int begin = (threadIdx.x / kWarpSize) * per_warp;
  if (begin >= vectors) return;  // uniform over the warp
  const int count = vectors - begin < per_warp ? vectors - begin : per_warp;
  const int4* row = nullptr;
  if (expert >= 0 && dest != own) {
    row =
        reinterpret_cast<const int4*>(rows + ll_entry_row_offset(dest, message_index(c, t, dest), on_rank, g.max_tokens,
                                                                 g.max_entries, static_cast<uint64_t>(g.row_bytes))) +
        begin;
  } else if (expert >= 0 && own_row >= 0) {
    row = reinterpret_cast<const int4*>(p.expert_out + static_cast<size_t>(own_row) * g.hidden) + begin;
  }
  // Terms are the top-k slots, lane k looking up slot k (c.topk <= kWarpSize).
  auto term = [&](int) { return row; };
  auto weight_of = [&](int) { return weight; };
  void* out_part = static_cast<char*>(out) + static_cast<size_t>(begin) * kBf16PerVector * sum_output_bytes(p.out_type);
  warp_sum_bf16_rows(c.topk, term, count, out_part, p.out_type, NoComputedTerm{},
                     TermWeights<decltype(weight_of)>{weight_of});
}

}  // namespace epc::kernels::combine
