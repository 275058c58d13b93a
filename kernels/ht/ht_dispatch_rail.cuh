// SPDX-License-Identifier: Apache-2.0
// High-throughput dispatch across nodes, the sending side of the rails: a token crosses to
// another node once, into the rail slot of this rank's peer there (ht_message.hpp,
// HtRailSlot), whatever number of that node's ranks host its experts; the peer forwards it
// (ht_dispatch_forward.cuh). Each chunk of source tokens raises one rail flag at every
// other node's peer, carrying which of the chunk's tokens came (a bit per token), so the
// peer can raise the per-rank flags of its node even for chunks that brought nothing.
#pragma once

#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/row_copy.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ht_params.hpp"

namespace epc::kernels::ht_dispatch_rail {

// Window offset of this rank's rail slot for token t in every rail peer's window.
__device__ __forceinline__ uint64_t slot_offset(const HtDispatchParams& p, int t) {
  const HtGeometry& g = p.common.geo;
  return ht_slot_offset(p.rail_data_offset, g.node_of(g.rank), t, g.max_tokens, g.rail_slot.bytes);
}

// Scales, the token's global entries and weights, and its rows on node m's ranks; kPacked
// (EXPERT_PACKED), also each entry's place among this rank's entries for the rank hosting
// its expert, which the forwarder writes where a direct slot has it (ht_message.hpp).
template <bool kPacked>
__device__ __forceinline__ void write_extras(const HtDispatchParams& p, int t, int m, char* slot) {
  const HtGeometry& g = p.common.geo;
  const int lane = lane_id();
  if (p.scale_bytes > 0) {
    warp_copy_scales<RowLoad::kReadOnly>(slot + p.scales_offset,
                                         static_cast<const char*>(p.x_scales) + static_cast<size_t>(t) * p.scale_bytes,
                                         p.scale_bytes);
  }
  if (lane < g.topk) {
    reinterpret_cast<int32_t*>(slot + g.dispatch_slot.topk_offset)[lane] = p.common.handle.topk_idx[t * g.topk + lane];
    reinterpret_cast<float*>(slot + g.dispatch_slot.weights_offset)[lane] =
        p.weights != nullptr ? p.weights[t * g.topk + lane] : 0.0f;
    if (kPacked) {
      const uint32_t places = ht_rail_positions_offset(g.rail_slot, static_cast<uint32_t>(g.node_size));
      reinterpret_cast<int32_t*>(slot + places)[lane] = p.common.handle.entry_position[t * g.topk + lane];
    }
  }
  const int32_t* rows = p.common.handle.token_row + static_cast<size_t>(t) * g.nranks + m * g.node_size;
  for (int i = lane; i < g.node_size; i += kWarpSize) {
    reinterpret_cast<int32_t*>(slot + g.rail_slot.rows_offset)[i] = rows[i];
  }
}

// The whole warp: token t into the rail slot of every other node that hosts its experts.
template <bool kPacked>
__device__ __forceinline__ void send_token(const HtDispatchParams& p, int t, const int4* payload) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int32_t* rows = c.handle.token_row + static_cast<size_t>(t) * g.nranks;
  const int own_node = g.node_of(g.rank);
  for (int first = 0; first < g.num_nodes; first += kWarpSize) {
    const int m = first + lane_id();  // lane i serves node first + i
    const bool goes = m < g.num_nodes && m != own_node && g.node_receives(rows, m);
    char* my_dst = goes ? static_cast<char*>(c.transport.buffer(slot_offset(p, t), g.rail_peer(m))) : nullptr;
    const unsigned nodes = __ballot_sync(0xffffffffu, goes);
    if (nodes == 0) continue;
    warp_copy_row_to_lanes<RowLoad::kReadOnly>(payload, p.row_bytes / 16, nodes, reinterpret_cast<int4*>(my_dst));
    for (unsigned rest = nodes; rest != 0; rest &= rest - 1) {
      const int owner = __ffs(rest) - 1;
      write_extras<kPacked>(
          p, t, first + owner,
          reinterpret_cast<char*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(my_dst), owner)));
    }
  }
}

// Bit j: token chunk * kHtChunkTokens + j goes to node m.
__device__ __forceinline__ uint32_t chunk_mask(const HtDispatchParams& p, int chunk, int m) {
  const HtCommon& c = p.common;
  const int first = chunk * kHtChunkTokens, end = min(c.num_tokens, first + kHtChunkTokens);
  uint32_t mask = 0;
  for (int t = first; t < end; ++t) {
    if (c.geo.node_receives(c.handle.token_row + static_cast<size_t>(t) * c.geo.nranks, m)) mask |= 1u << (t - first);
  }
  return mask;
}

// The whole warp, after the chunk's rail slots are written: puts them to the rail peers and
// raises one rail flag at each. Nodes are taken 32 at a time, lane i holding node
// first + i's token mask.
__device__ __forceinline__ void publish_chunk(const HtDispatchParams& p, uint64_t step, int chunk) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int own_node = g.node_of(g.rank);
  const uint64_t flag = ht_chunk_flag_word(p.rail_flags_offset, own_node, chunk, g.max_tokens);
  for (int first = 0; first < g.num_nodes; first += kWarpSize) {
    const int m = first + lane_id();
    const bool other = m < g.num_nodes && m != own_node;
    const uint32_t my_mask = other ? chunk_mask(p, chunk, m) : 0;
    for (int i = 0; i < kWarpSize && first + i < g.num_nodes; ++i) {
      const uint32_t mask = __shfl_sync(0xffffffffu, my_mask, i);
      for (int j = 0; j < kHtChunkTokens; ++j) {
        if (((mask >> j) & 1u) == 0) continue;
        const int t = chunk * kHtChunkTokens + j;
        c.transport.commit(slot_offset(p, t), g.rail_slot.bytes, g.rail_peer(first + i), lane_id(), kWarpSize);
      }
    }
    __threadfence_system();
    __syncwarp();
    if (other) c.transport.signal(flag, g.rail_peer(m), chunk_flag(step, my_mask, 0));
  }
}

}  // namespace epc::kernels::ht_dispatch_rail
