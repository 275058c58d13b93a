// SPDX-License-Identifier: Apache-2.0
// High-throughput combine, sending part. Rows received from source s occupy rows
// recv_base[s] + j of the caller's tensor; each warp takes chunks of kHtChunkTokens rows of
// one source, writes them (and, for the backward pass, their top-k weights) into slots
// [this rank's rail peer in s's node][j] of their target, and raises one flag per chunk
// there. The target is s itself when s is in this node (the slot index is then this rank);
// across nodes it is s's rail peer in this node, which reduces the node's rows for each of
// s's tokens into one (ht_combine_forward.cuh, ht_message.hpp). Rows whose target is this
// rank are read in place. With EPC_WEIGHTING_HOME (EXPERT_PACKED) each of a token's
// entries goes unweighted into its own slot [the same index][j * entry_slots + k] instead
// (across nodes the rail peer forwards it unreduced); a chunk's flag still covers its tokens. Like dispatch, it first waits until every
// rank has acknowledged the previous combine.
#pragma once

#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/row_copy.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/ht/ht_packed_rows.cuh"
#include "kernels/ht/ht_warp_roles.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ht_params.hpp"

namespace epc::kernels::ht_combine_send {

__device__ __forceinline__ void write_row(const HtCombineParams& p, int row, char* slot) {
  const HtGeometry& g = p.common.geo;
  const int lane = lane_id();
  warp_copy_row_segmented<RowLoad::kReadOnly>(reinterpret_cast<int4*>(slot),
                                              reinterpret_cast<const int4*>(p.x + static_cast<size_t>(row) * g.hidden),
                                              g.hidden * 2 / 16);
  if (p.weights != nullptr && lane < g.topk) {
    reinterpret_cast<float*>(slot + g.combine_slot.weights_offset)[lane] =
        __ldg(p.weights + static_cast<size_t>(row) * g.topk + lane);
  }
}

// Returns false when a wait failed (recorded in the group's error).
template <HtCombineKind kKind>
__device__ __forceinline__ bool run(const HtCombineParams& p, uint64_t step, const WarpRole& role) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  auto source_of = [&g](int k) { return g.combine_send_source(k); };
  auto chunks_of = [&c](int s) { return ht_chunks(c.handle.recv_count[s]); };
  const RoundRobinDeal deal(g.combine_send_streams(), source_of, chunks_of);
  if (role.index >= deal.items) return true;
  if (!warp_wait_for_every_peer_signal(c.transport, p.channel.acks_offset, g.nranks, AtLeast{step}, c.timeout_ns,
                                       c.error, kPhaseHtCombine, g.rank)) {
    return false;
  }
  for (int item = role.index; item < deal.items; item += role.count) {
    int source, chunk;
    if (!deal.item(item, &source, &chunk)) continue;
    const int target = g.in_own_node(source) ? source : g.rail_peer_here(source);
    const int index = g.rail_peer(g.node_of(source));  // this rank, when source is in its node
    const int first = chunk * kHtChunkTokens;
    const int end = min(c.handle.recv_count[source], first + kHtChunkTokens);
    const int base = c.handle.recv_base[source];
    // Slots per token: one, or one per entry (EPC_WEIGHTING_HOME).
    const int per_token = kKind == HtCombineKind::kPackedHome ? p.entry_slots : 1;
    const uint64_t offset =
        ht_slot_offset(p.channel.data_offset, index, first * per_token, g.max_tokens * per_token, g.combine_slot.bytes);
    for (int j = first; j < end; ++j) {
      auto slot = [&](int k) {
        const uint64_t at = static_cast<uint64_t>((j - first) * per_token + k) * g.combine_slot.bytes;
        return static_cast<char*>(c.transport.buffer(offset + at, target));
      };
      if constexpr (kKind == HtCombineKind::kPackedHome) {
        write_packed_entries(p, source, j, slot);
      } else if constexpr (packed_partials(kKind)) {
        write_packed_partial<kKind == HtCombineKind::kPackedLone>(p, source, j, slot(0));
      } else {
        write_row(p, base + j, slot(0));
      }
    }
    __syncwarp();  // the warp commits together what its lanes wrote
    c.transport.commit(offset, static_cast<uint64_t>((end - first) * per_token) * g.combine_slot.bytes, target,
                       lane_id(), kWarpSize);
    __threadfence_system();
    __syncwarp();
    if (lane_id() == 0) {
      const uint64_t flag = ht_chunk_flag_word(p.channel.flags_offset, index, chunk, g.max_tokens);
      c.transport.signal(flag, target, chunk_flag(step, static_cast<uint32_t>(first), static_cast<uint32_t>(end)));
    }
  }
  return true;
}

}  // namespace epc::kernels::ht_combine_send
