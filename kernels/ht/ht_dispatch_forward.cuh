// SPDX-License-Identifier: Apache-2.0
// High-throughput dispatch across nodes, the forwarding part: this rank stands in, inside
// its node, for its rail peer in every other node. Each warp takes (source node, chunk)
// items: it waits for the rail flag of that chunk (which of its tokens came), copies each
// token that came from the rail slot into the dispatch slot of its row on every rank of
// this node the token has entries on (this rank included), with the entries that are local
// there: slot forward_slot[m][i] + row of rank i, where the layout says the source's rows
// start there (ht_capacity.hpp). It then raises those ranks' flags for (source, chunk) with
// the rows the chunk filled, exactly as the source would have: receivers cannot tell
// forwarded rows from direct ones. Like the senders, it first waits until every rank has
// acknowledged the previous dispatch, so no slot is overwritten while it is still being
// read. It also records where the tokens went, which combine's reducers need
// (ht_combine_forward.cuh).
#pragma once

#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/row_copy.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/ht/ht_rail_chunks.cuh"
#include "kernels/ht/ht_warp_roles.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ht_params.hpp"

namespace epc::kernels::ht_dispatch_forward {

// Scales, and the entries local to rank `dest`, from the rail slot into dest's slot: their
// local expert ids, or (kPacked: EXPERT_PACKED) their places among the source's entries for
// dest, as the source writes a direct slot (ht_dispatch_send.cuh).
template <bool kPacked>
__device__ __forceinline__ void copy_extras(const HtDispatchParams& p, const char* rail, int dest, char* slot) {
  const HtGeometry& g = p.common.geo;
  const int lane = lane_id();
  if (p.scale_bytes > 0)
    warp_copy_scales<RowLoad::kCoherent>(slot + p.scales_offset, rail + p.scales_offset, p.scale_bytes);
  if (lane < g.topk) {
    const int expert = __ldcg(reinterpret_cast<const int32_t*>(rail + g.dispatch_slot.topk_offset) + lane);
    const float weight = __ldcg(reinterpret_cast<const float*>(rail + g.dispatch_slot.weights_offset) + lane);
    const bool local = expert >= 0 && expert / g.local_experts == dest;
    int32_t entry = local ? expert - dest * g.local_experts : -1;
    if (kPacked && local) {
      const uint32_t places = ht_rail_positions_offset(g.rail_slot, static_cast<uint32_t>(g.node_size));
      entry = __ldcg(reinterpret_cast<const int32_t*>(rail + places) + lane);
    }
    reinterpret_cast<int32_t*>(slot + g.dispatch_slot.topk_offset)[lane] = entry;
    reinterpret_cast<float*>(slot + g.dispatch_slot.weights_offset)[lane] = local ? weight : 0.0f;
  }
}

// Keeps, for combine's reducers, where each token of the chunk went on this node's ranks
// and its global entries (HtHandleArrays::forwarded_rows / forwarded_topk). Here: rows of
// -1 for a token that did not come, and the entries of one that did; the rows of a token
// that came are recorded by forward_chunk, which reads them from the rail slot anyway.
__device__ __forceinline__ void record_chunk(const HtDispatchParams& p, int m, int chunk, uint32_t mask) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int lane = lane_id();
  const int first = chunk * kHtChunkTokens;
  const int end = min(c.handle.source_tokens[g.rail_peer(m)], first + kHtChunkTokens);
  for (int t = first; t < end; ++t) {
    const bool came = ((mask >> (t - first)) & 1u) != 0;
    const size_t record = static_cast<size_t>(m) * g.max_tokens + t;
    const char* rail = static_cast<const char*>(
        c.transport.local(ht_slot_offset(p.rail_data_offset, m, t, g.max_tokens, g.rail_slot.bytes)));
    int32_t* rows = c.handle.forwarded_rows + record * g.node_size;
    for (int i = lane; i < g.node_size && !came; i += kWarpSize) rows[i] = -1;
    if (came && lane < g.topk) {
      c.handle.forwarded_topk[record * g.topk + lane] =
          __ldcg(reinterpret_cast<const int32_t*>(rail + g.dispatch_slot.topk_offset) + lane);
    }
  }
}

// Forwards chunk `chunk` of `source` (whose rail flag said `mask`) to the ranks
// first .. first + 31 of this node [node_begin, node_end) (lane i: rank first + i), then
// raises their flags. Records the rows of the tokens that came (record_chunk).
template <bool kPacked>
__device__ __forceinline__ void forward_chunk(const HtDispatchParams& p, uint64_t step, int source, int chunk,
                                              uint32_t mask, int first, int node_begin, int node_end) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int dest = first + lane_id();
  const bool mine = dest < node_end;
  // Where the source's rows start in dest's window (ht_capacity.hpp, ht_forward_slot).
  const int first_slot = mine ? c.handle.forward_slot[g.node_of(source) * g.node_size + (dest - node_begin)] : 0;
  int start = 0, end = 0;  // rows this chunk fills on `dest`
  for (int j = 0; j < kHtChunkTokens; ++j) {
    if (((mask >> j) & 1u) == 0) continue;
    const int t = chunk * kHtChunkTokens + j;
    const uint64_t record = static_cast<uint64_t>(g.node_of(source)) * g.max_tokens + t;
    const char* rail = static_cast<const char*>(
        c.transport.local(ht_slot_offset(p.rail_data_offset, g.node_of(source), t, g.max_tokens, g.rail_slot.bytes)));
    const int row =
        mine ? __ldcg(reinterpret_cast<const int32_t*>(rail + g.rail_slot.rows_offset) + (dest - node_begin)) : -1;
    if (mine) c.handle.forwarded_rows[record * g.node_size + (dest - node_begin)] = row;
    if (row >= 0) {
      if (end == start) start = row;
      end = row + 1;
    }
    char* my_dst = nullptr;
    if (row >= 0) {
      my_dst = static_cast<char*>(c.transport.buffer(
          ht_window_slot_offset(p.channel.data_offset, first_slot, row, g.dispatch_slot.bytes), dest));
    }
    const unsigned dests = __ballot_sync(0xffffffffu, row >= 0);
    if (dests == 0) continue;
    warp_copy_row_to_lanes<RowLoad::kCoherent>(reinterpret_cast<const int4*>(rail), p.row_bytes / 16, dests,
                                               reinterpret_cast<int4*>(my_dst));
    for (unsigned rest = dests; rest != 0; rest &= rest - 1) {
      const int owner = __ffs(rest) - 1;
      copy_extras<kPacked>(
          p, rail, first + owner,
          reinterpret_cast<char*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(my_dst), owner)));
    }
  }
  __syncwarp();  // the warp commits together what its lanes wrote
  for (int i = 0; i < kWarpSize && first + i < node_end; ++i) {
    const int s = __shfl_sync(0xffffffffu, start, i), e = __shfl_sync(0xffffffffu, end, i);
    const int slot = __shfl_sync(0xffffffffu, first_slot, i);
    if (e > s) {
      const uint64_t offset = ht_window_slot_offset(p.channel.data_offset, slot, s, g.dispatch_slot.bytes);
      c.transport.commit(offset, static_cast<uint64_t>(e - s) * g.dispatch_slot.bytes, first + i, lane_id(), kWarpSize);
    }
  }
  __threadfence_system();
  __syncwarp();
  if (mine) {
    const uint64_t flag = ht_chunk_flag_word(p.channel.flags_offset, source, chunk, g.max_tokens);
    c.transport.signal(flag, dest, chunk_flag(step, static_cast<uint32_t>(start), static_cast<uint32_t>(end)));
  }
}

// Returns false when a wait failed (recorded in the group's error). kPacked: EXPERT_PACKED.
template <bool kPacked>
__device__ __forceinline__ bool run(const HtDispatchParams& p, uint64_t step, const WarpRole& role) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int node_begin = g.node_of(g.rank) * g.node_size, node_end = node_begin + g.node_size;
  return for_each_rail_chunk(c, p.channel.acks_offset, step, kPhaseHtDispatch, role, [&](int m, int chunk, int source) {
    uint64_t flag = 0;
    bool ok = true;
    if (lane_id() == 0) {
      const uint64_t word = ht_chunk_flag_word(p.rail_flags_offset, m, chunk, g.max_tokens);
      ok = wait_for_signal(c.transport, word, source, ChunkFlagOf{chunk_epoch(step)}, &flag, c.timeout_ns, c.error,
                           kPhaseHtDispatch, g.rank, source);
    }
    __syncwarp();
    if (!__shfl_sync(0xffffffffu, ok, 0)) return false;
    const uint32_t mask = static_cast<uint32_t>(chunk_flag_start(__shfl_sync(0xffffffffu, flag, 0)));
    record_chunk(p, m, chunk, mask);
    for (int first = node_begin; first < node_end; first += kWarpSize) {
      forward_chunk<kPacked>(p, step, source, chunk, mask, first, node_begin, node_end);
    }
    return true;
  });
}

}  // namespace epc::kernels::ht_dispatch_forward
