// SPDX-License-Identifier: Apache-2.0
// The work of a forwarding warp, in dispatch and in combine across nodes: the chunks of this
// rank's rail peer in every other node (the sources whose tokens this rank forwards, and
// whose partials it reduces), dealt round-robin over the other nodes (RoundRobinDeal), so
// consecutive items, and the ranks' first items, touch different nodes.
#pragma once

#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/ht/ht_warp_roles.cuh"
#include "kernels/wire/ht_params.hpp"

namespace epc::kernels {

// Calls chunk(m, chunk, source) for this warp's items, after every rank acknowledged the
// previous step into `acks_offset` (the slots written next are free); a warp with no item
// waits for nothing. Returns false when a wait failed or chunk() returned false.
template <typename Chunk>
__device__ __forceinline__ bool for_each_rail_chunk(const HtCommon& c, uint64_t acks_offset, uint64_t step,
                                                    uint32_t phase, const WarpRole& role, Chunk chunk) {
  const HtGeometry& g = c.geo;
  const int own_node = g.node_of(g.rank);
  auto other_node = [&g, own_node](int k) { return ring_member_after(own_node, k, g.num_nodes); };
  auto chunks_of = [&](int m) { return ht_chunks(c.handle.source_tokens[g.rail_peer(m)]); };
  const RoundRobinDeal deal(g.num_nodes - 1, other_node, chunks_of);
  if (role.index >= deal.items) return true;
  if (!warp_wait_for_every_peer_signal(c.transport, acks_offset, g.nranks, AtLeast{step}, c.timeout_ns, c.error, phase,
                                       g.rank)) {
    return false;
  }
  for (int item = role.index; item < deal.items; item += role.count) {
    int m, index;
    if (!deal.item(item, &m, &index)) continue;
    if (!chunk(m, index, g.rail_peer(m))) return false;
  }
  return true;
}

}  // namespace epc::kernels
