// SPDX-License-Identifier: Apache-2.0
// High-throughput combine over credit rings inside a node (issue 27, step C), the way back of
// ht_dispatch_rings.cuh: each rank returns the rows it received from source s through the ring
// (this rank, s, channel g) of s's window instead of s's [R][T] slots, its own rows through its
// ring to itself. Ring (d, s, g) carries, in s's token order, the rows of s's tokens t with
// t % G == g that d received (dispatch over rings recorded each row's token in
// HtHandleArrays::ring_tokens), each slot a header naming (d, row, token) before the combine
// slot's bytes. Sending warp (s, g) writes ring (this rank, s, g); receiving warp g takes s's
// tokens t % G == g in order, a lane per rank of the node waiting for that rank's row of the
// token, and sums them as the flat layout's receiving part does (ranks ascending, in fp32,
// rounded once), so the output is bit for bit the same. Each ring has a writer of its own,
// and a receiving warp only waits for the rows of the one token it sums, after giving every
// credit it held: rings carry rows in token order, so the smallest token not yet summed
// anywhere always has its rows written or room to write them, and every ring drains (with
// every warp resident: the launch is fused, which the handle checks).
//
// Served for the FLAT layout on groups of one node, after a dispatch over rings, when the
// environment forces rings (core/ht/ht_rings.hpp); every other combine runs
// ht_combine_send.cuh and ht_combine_recv.cuh.
#pragma once

#include "kernels/device/bf16_row_sum.cuh"
#include "kernels/device/report.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/ht/ht_combine_send.cuh"
#include "kernels/ht/ht_ring.cuh"
#include "kernels/ht/ht_warp_roles.cuh"
#include "kernels/wire/ht_params.hpp"
#include "kernels/wire/ht_ring.hpp"

namespace epc::kernels::ht_combine_rings {

static_assert(kHtRingMaxNodeSize <= kWarpSize, "a lane of the receiving warp per writer");

__device__ __forceinline__ int node_begin(const HtGeometry& g) { return g.node_of(g.rank) * g.node_size; }

// Sending warp (source, channel): the rows this rank received from `source` whose tokens are
// in the channel, in token order, into ring (this rank, source, channel).
__device__ __forceinline__ bool send(const HtCombineParams& p, uint64_t step, const WarpRole& role) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int channels = static_cast<int>(p.rings.channels);
  if (role.index >= g.node_size * channels) return true;
  if (!warp_wait_for_every_peer_signal(c.transport, p.channel.acks_offset, g.nranks, AtLeast{step}, c.timeout_ns,
                                       c.error, kPhaseHtCombine, g.rank)) {
    return false;
  }
  const int source = node_begin(g) + role.index / channels, channel = role.index % channels;
  const int lane = lane_id();
  const RingWait wait{c.timeout_ns, c.error, kPhaseHtRingSpace};
  HtRingLaneWriter w{};  // lane 0 holds the ring's end
  w.active = lane == 0;
  uint64_t* saved = nullptr;
  if (w.active) {
    w.place = ht_ring_place(p.rings, node_begin(g), g.rank, source, channel);
    saved = static_cast<uint64_t*>(c.transport.local(p.rings.writer_state(source - node_begin(g), channel)));
    w.restore(saved);
  }
  const uint64_t batch = ht_ring_signal_batch(p.rings);
  const int base = c.handle.recv_base[source], rows = c.handle.recv_count[source];
  for (int first = 0; first < rows; first += kWarpSize) {
    // Lane i looks at row first + i: its token, and whether the token is in the channel.
    const int j = first + lane;
    const int token = j < rows ? c.handle.ring_tokens[base + j] : -1;
    const unsigned mine = __ballot_sync(0xffffffffu, token >= 0 && token % channels == channel);
    for (unsigned rest = mine; rest != 0; rest &= rest - 1) {
      const int owner = __ffs(rest) - 1;
      const int row = first + owner, t = __shfl_sync(0xffffffffu, token, owner);
      if (!w.wait_space(c.transport, w.active, wait)) return false;
      char* slot = reinterpret_cast<char*>(
          __shfl_sync(0xffffffffu, w.active ? reinterpret_cast<uintptr_t>(w.slot(c.transport)) : uintptr_t{0}, 0));
      if (w.active) *reinterpret_cast<int4*>(slot) = make_int4(g.rank, row, t, g.node_of(g.rank));
      ht_combine_send::write_row(p, base + row, slot + sizeof(HtRingHeader));
      if (w.active) ++w.tail;
      if (__any_sync(0xffffffffu, w.tail - w.published >= batch)) w.publish(c.transport);
    }
  }
  w.publish(c.transport);
  if (w.active) w.save(saved);
  return true;
}

// Receiving warp `channel`: this rank's tokens t with t % G == channel in order, lane d the
// reader of the ring from the node's rank d.
__device__ __forceinline__ bool receive(const HtCombineParams& p, uint64_t, const WarpRole& role) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int channels = static_cast<int>(p.rings.channels);
  if (role.index >= channels) return true;
  const int channel = role.index, lane = lane_id(), writer = node_begin(g) + lane;
  const RingWait wait{c.timeout_ns, c.error, kPhaseHtRingData};
  HtRingLaneReader r{};
  r.active = lane < g.node_size;
  uint64_t* saved = nullptr;
  if (r.active) {
    r.place = ht_ring_place(p.rings, node_begin(g), writer, g.rank, channel);
    saved = static_cast<uint64_t*>(c.transport.local(p.rings.reader_state(lane, channel)));
    r.restore(saved);
  }
  const uint64_t batch = ht_ring_signal_batch(p.rings);
  const size_t out_row_bytes = static_cast<size_t>(g.hidden) * sum_output_bytes(p.out_type);
  bool ok = true;
  for (int t = channel; t < c.num_tokens && ok; t += channels) {
    const int32_t* rows = c.handle.token_row + static_cast<size_t>(t) * g.nranks;
    const int row = r.active ? rows[writer] : -1;
    if (!r.wait_data(c.transport, row >= 0, wait)) return false;
    const char* body = nullptr;
    if (row >= 0) {
      const char* slot = r.slot(c.transport);
      const int4 header = __ldcg(reinterpret_cast<const int4*>(slot));
      // A slot for another row is never written by a writer of this combine: reported.
      if (header.x != writer || header.y != row || header.z != t) {
        report_failure(c.error, EPC_ERR_INTERNAL, kPhaseHtRingData, g.rank, writer, 0);
        ok = false;
      }
      body = slot + sizeof(HtRingHeader);
    }
    if (!__all_sync(0xffffffffu, ok)) return false;
    // Lane d holds rank d's row of the token: the terms in rank order, as ht_combine_recv sums.
    auto term = [&](int) { return reinterpret_cast<const int4*>(body); };
    warp_sum_bf16_rows(g.node_size, term, g.hidden / kBf16PerVector,
                       static_cast<char*>(p.out) + static_cast<size_t>(t) * out_row_bytes, p.out_type);
    if (p.out_weights != nullptr) {
      // Entry k's weight from the row of the rank hosting its expert.
      const int k = lane;
      const int expert = k < g.topk ? c.handle.topk_idx[t * g.topk + k] : -1;
      const int owner = expert >= 0 ? expert / g.local_experts - node_begin(g) : 0;
      const char* owner_body =
          reinterpret_cast<const char*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(body), owner));
      if (k < g.topk) {
        const float weight =
            expert >= 0 && owner_body != nullptr
                ? __ldcg(reinterpret_cast<const float*>(owner_body + g.combine_slot.weights_offset) + k)
                : 0.0f;
        p.out_weights[static_cast<size_t>(t) * g.topk + k] = weight;
      }
    }
    if (row >= 0) ++r.head;
    if (__any_sync(0xffffffffu, r.head - r.credited >= batch)) r.give_credit(c.transport);
  }
  r.give_credit(c.transport);
  if (r.active) r.save(saved);
  return true;
}

}  // namespace epc::kernels::ht_combine_rings
