// SPDX-License-Identifier: Apache-2.0
// High-throughput dispatch, sending part. Each warp takes chunks of kHtChunkTokens source
// tokens; for each token it writes one slot into every rank of this node hosting one of its
// entries (payload, scales, the entries that are local there and their weights) at the
// row the layout gave it, then publishes the chunk to every other rank of the node with one
// flag carrying the chunk's row range there (possibly empty). Other nodes get each token
// once, through their rail peer, which forwards it (ht_dispatch_rail.cuh). Rows for this rank itself go straight into the
// caller's outputs. Before writing anything it waits until every rank has
// acknowledged the previous dispatch, so no slot is overwritten while still being read.
#pragma once

#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/row_copy.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/ht/ht_dispatch_rail.cuh"
#include "kernels/ht/ht_packed_rows.cuh"
#include "kernels/ht/ht_warp_roles.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ht_params.hpp"

namespace epc::kernels::ht_dispatch_send {

// Token t's scales in x_scales (passthrough; the payload moves with warp_copy_row_to_lanes).
__device__ __forceinline__ const char* token_scales(const HtDispatchParams& p, int t) {
  return static_cast<const char*>(p.x_scales) + static_cast<size_t>(t) * p.scale_bytes;
}

// Entry k's local expert on `dest` (-1 where not local) and its weight (0 where not local).
__device__ __forceinline__ void entry_on(const HtDispatchParams& p, int t, int dest, int k, int32_t* local_expert,
                                         float* weight) {
  const HtGeometry& g = p.common.geo;
  const int expert = p.common.handle.topk_idx[t * g.topk + k];
  const bool local = expert >= 0 && expert / g.local_experts == dest;
  *local_expert = local ? expert - dest * g.local_experts : -1;
  *weight = local && p.weights != nullptr ? p.weights[t * g.topk + k] : 0.0f;
}

// The token's scales and entries into a peer's slot.
template <bool kPacked>
__device__ __forceinline__ void write_slot_extras(const HtDispatchParams& p, int t, int dest, char* slot) {
  const HtGeometry& g = p.common.geo;
  if (p.scale_bytes > 0)
    warp_copy_scales<RowLoad::kReadOnly>(slot + p.scales_offset, token_scales(p, t), p.scale_bytes);
  const int k = lane_id();
  if (k >= g.topk) return;
  int32_t local_expert;
  float weight;
  entry_on(p, t, dest, k, &local_expert, &weight);
  // EXPERT_PACKED: the entry's place among this rank's entries for dest (ht_message.hpp).
  if (kPacked && local_expert >= 0) local_expert = p.common.handle.entry_position[t * g.topk + k];
  reinterpret_cast<int32_t*>(slot + g.dispatch_slot.topk_offset)[k] = local_expert;
  reinterpret_cast<float*>(slot + g.dispatch_slot.weights_offset)[k] = weight;
}

// EXPERT_PACKED: a token this rank sends itself goes straight into its entries' rows. Its row
// among this rank's own tokens (j), and each entry's expert, weight and place, load at once:
// none of them depends on another, so the row a lane writes waits for one load before the
// expert's base (packed_row_of), not for a chain of them.
__device__ __forceinline__ void write_own_packed(const HtDispatchParams& p, int t, const int4* payload) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int k = lane_id();
  const int j = c.handle.token_row[static_cast<size_t>(t) * g.nranks + g.rank];
  int32_t expert = -1, place = -1;
  float weight = 0.0f;
  if (k < g.topk) {
    expert = c.handle.topk_idx[t * g.topk + k];
    place = c.handle.entry_position[t * g.topk + k];
    if (p.weights != nullptr) weight = p.weights[t * g.topk + k];
  }
  if (j < 0) return;  // the token has no entry here
  const int local = expert >= 0 && expert / g.local_experts == g.rank ? expert - g.rank * g.local_experts : -1;
  write_packed_rows<RowLoad::kReadOnly>(p, payload, p.scale_bytes > 0 ? token_scales(p, t) : nullptr,
                                        local >= 0 ? place : -1, local >= 0 ? weight : 0.0f, g.rank, j, local);
}

// The same for a token this rank sends itself: straight into the caller's outputs at `row`.
__device__ __forceinline__ void write_own_extras(const HtDispatchParams& p, int t, int row) {
  const HtGeometry& g = p.common.geo;
  if (p.scale_bytes > 0) {
    warp_copy_scales<RowLoad::kReadOnly>(static_cast<char*>(p.out_scales) + static_cast<size_t>(row) * p.scale_bytes,
                                         token_scales(p, t), p.scale_bytes);
  }
  const int k = lane_id();
  if (k >= g.topk) return;
  int32_t local_expert;
  float weight;
  entry_on(p, t, g.rank, k, &local_expert, &weight);
  if (p.out_topk_idx != nullptr) {
    p.out_topk_idx[static_cast<size_t>(row) * g.topk + k] = local_expert >= 0 ? local_expert + p.expert_id_base : -1;
  }
  if (p.out_topk_weights != nullptr) p.out_topk_weights[static_cast<size_t>(row) * g.topk + k] = weight;
}

// The ranks of this rank's node: every rank when the group is one node.
__device__ __forceinline__ int node_begin(const HtGeometry& g) { return g.node_of(g.rank) * g.node_size; }

// Ranks of this node get the token directly; other nodes once each, through their rail peer
// (ht_dispatch_rail.cuh). Rows a token sends itself skip the window: the payload goes
// straight to out_x (at the row the receiving part would have copied it to) along with its
// scales and entries. kPacked: EXPERT_PACKED.
template <bool kPacked>
__device__ __forceinline__ void send_token(const HtDispatchParams& p, int t) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int32_t* rows = c.handle.token_row + static_cast<size_t>(t) * g.nranks;
  const int4* payload =
      reinterpret_cast<const int4*>(static_cast<const char*>(p.x) + static_cast<size_t>(t) * p.row_bytes);
  const int own_row = c.handle.recv_base[g.rank];
  const int node_end = node_begin(g) + g.node_size;
  if (g.num_nodes > 1) ht_dispatch_rail::send_token<kPacked>(p, t, payload);
  for (int first = node_begin(g); first < node_end; first += kWarpSize) {
    // Lane i serves destination first + i: where the row goes there, if the token goes there.
    const int mine = first + lane_id();
    // EXPERT_PACKED rows for this rank take their own path (one row per local entry).
    const int row = mine < node_end && !(kPacked && mine == g.rank) ? rows[mine] : -1;
    char* my_dst = nullptr;
    if (row >= 0 && mine == g.rank) {
      my_dst = static_cast<char*>(p.out_x) + static_cast<size_t>(own_row + row) * p.row_bytes;
    } else if (row >= 0) {
      const uint64_t offset =
          ht_window_slot_offset(p.channel.data_offset, c.handle.send_slot[mine], row, g.dispatch_slot.bytes);
      my_dst = static_cast<char*>(c.transport.buffer(offset, mine));
    }
    const unsigned dests = __ballot_sync(0xffffffffu, row >= 0);
    if (dests == 0) continue;
    warp_copy_row_to_lanes<RowLoad::kReadOnly>(payload, p.row_bytes / 16, dests, reinterpret_cast<int4*>(my_dst));
    for (unsigned rest = dests; rest != 0; rest &= rest - 1) {
      const int owner = __ffs(rest) - 1;
      const int dest = first + owner;
      if (dest == g.rank) {
        write_own_extras(p, t, own_row + __shfl_sync(0xffffffffu, row, owner));
      } else {
        write_slot_extras<kPacked>(
            p, t, dest, reinterpret_cast<char*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(my_dst), owner)));
      }
    }
  }
  if constexpr (kPacked) write_own_packed(p, t, payload);
}

// Raises the chunk's flags at every other rank of this node (and publishes the rails to
// other nodes). Ranks of this node were written directly (buffer() is their memory), so
// there is nothing to commit for them.
__device__ __forceinline__ void publish_chunk(const HtDispatchParams& p, uint64_t step, int chunk) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int R = g.nranks;
  const int node_end = node_begin(g) + g.node_size;
  __syncwarp();  // the warp commits together what its lanes wrote
  if (g.num_nodes > 1) ht_dispatch_rail::publish_chunk(p, step, chunk);
  __threadfence_system();
  __syncwarp();
  const uint64_t flags = ht_chunk_flag_word(p.channel.flags_offset, g.rank, chunk, g.max_tokens);
  for (int d = node_begin(g) + lane_id(); d < node_end; d += kWarpSize) {
    if (d == g.rank) continue;  // rows for this rank went straight to out_x
    const int start = c.handle.chunk_start[chunk * R + d], end = c.handle.chunk_start[(chunk + 1) * R + d];
    c.transport.signal(flags, d, chunk_flag(step, static_cast<uint32_t>(start), static_cast<uint32_t>(end)));
  }
}

// Returns false when a wait failed (recorded in the group's error).
template <bool kPacked>
__device__ __forceinline__ bool run(const HtDispatchParams& p, uint64_t step, const WarpRole& role) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int chunks = ht_chunks(c.num_tokens);
  if (role.index >= chunks) return true;
  if (!warp_wait_for_every_peer_signal(c.transport, p.channel.acks_offset, g.nranks, AtLeast{step}, c.timeout_ns,
                                       c.error, kPhaseHtDispatch, g.rank)) {
    return false;
  }
  for (int chunk = role.index; chunk < chunks; chunk += role.count) {
    const int end = min(c.num_tokens, (chunk + 1) * kHtChunkTokens);
    for (int t = chunk * kHtChunkTokens; t < end; ++t) send_token<kPacked>(p, t);
    publish_chunk(p, step, chunk);
  }
  return true;
}

}  // namespace epc::kernels::ht_dispatch_send
