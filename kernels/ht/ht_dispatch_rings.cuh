// SPDX-License-Identifier: Apache-2.0
// High-throughput dispatch over credit rings inside a node (issue 27, step C; the protocol is
// kernels/wire/ht_ring.hpp's and kernels/ht/ht_ring.cuh's). Rows then need no [R][T] slots:
// each rank writes its rows for every rank of the node, itself included, into the ring
// (writer, reader, channel g) of the reader's window, tokens t with t % G == g in token
// order, each slot a header naming (source, row, token) and the dispatch slot's bytes. After its
// last token the writer publishes a header with source -1 into each of its rings, which ends
// the reader's step. Sending warp g writes channel g's rings, a lane per reader, copying each
// token once into every reader's slot; receiving warp (w, g) reads ring (w, g) and places each
// row where the flat layout's receiving part would (recv_base[source] + row). Both ends signal
// once per half ring rather than per slot. A reader waits on its one ring only, and a writer
// waits only after publishing all it wrote, so every ring drains: the launch must be fused
// (every warp resident), which the handle checks.
//
// Served for the FLAT layout on groups of one node, when the environment forces rings
// (core/ht/ht_rings.hpp says how); every other dispatch runs ht_dispatch_send.cuh and
// ht_dispatch_recv.cuh.
#pragma once

#include "kernels/device/report.cuh"
#include "kernels/device/row_copy.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/ht/ht_dispatch_recv.cuh"
#include "kernels/ht/ht_dispatch_send.cuh"
#include "kernels/ht/ht_ring.cuh"
#include "kernels/ht/ht_warp_roles.cuh"
#include "kernels/wire/ht_params.hpp"
#include "kernels/wire/ht_ring.hpp"

namespace epc::kernels::ht_dispatch_rings {

static_assert(kHtRingMaxNodeSize <= kWarpSize, "a lane of the writer warp per reader");
static_assert(kHtWarps == kHtBlockWarps, "the host counts a block's warps as kHtBlockWarps (check_ht_rings_served)");

__device__ __forceinline__ int node_begin(const HtGeometry& g) { return g.node_of(g.rank) * g.node_size; }

// Ring (writer, reader, channel) of the dispatch's rings.
__device__ __forceinline__ HtRingPlace ring_place(const HtDispatchParams& p, int writer, int reader, int channel) {
  return ht_ring_place(p.rings, node_begin(p.common.geo), writer, reader, channel);
}

// Sending warp `channel`: its tokens' rows, then the step's end, into every rank of the node,
// lane y the writer of the ring to the node's rank y (at most kWarpSize ranks: the planner
// checks), each token copied once into the slots of every rank it goes to.
__device__ __forceinline__ bool send(const HtDispatchParams& p, uint64_t step, const WarpRole& role) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int channels = static_cast<int>(p.rings.channels);
  if (role.index >= channels) return true;
  // Rows for this step may overwrite nothing a reader still needs (the credits say so), but
  // the step's other windows (combine's slots, the counts) follow the acknowledgements.
  if (!warp_wait_for_every_peer_signal(c.transport, p.channel.acks_offset, g.nranks, AtLeast{step}, c.timeout_ns,
                                       c.error, kPhaseHtDispatch, g.rank)) {
    return false;
  }
  const RingWait wait{c.timeout_ns, c.error, kPhaseHtRingSpace};
  const int channel = role.index, lane = lane_id(), reader = node_begin(g) + lane;
  HtRingLaneWriter w{};
  w.active = lane < g.node_size;
  uint64_t* saved = nullptr;
  if (w.active) {
    w.place = ring_place(p, g.rank, reader, channel);
    saved = static_cast<uint64_t*>(c.transport.local(p.rings.writer_state(lane, channel)));
    w.restore(saved);
  }
  const uint64_t batch = ht_ring_signal_batch(p.rings);
  const int vectors = p.row_bytes / 16;
  for (int t = channel; t < c.num_tokens; t += channels) {
    const int row = w.active ? c.handle.token_row[static_cast<size_t>(t) * g.nranks + reader] : -1;
    if (!w.wait_space(c.transport, row >= 0, wait)) return false;
    char* body = nullptr;
    if (row >= 0) {
      char* slot = w.slot(c.transport);
      *reinterpret_cast<int4*>(slot) = make_int4(g.rank, row, t, g.node_of(g.rank));
      body = slot + sizeof(HtRingHeader);
    }
    const unsigned readers = __ballot_sync(0xffffffffu, row >= 0);
    if (readers == 0) continue;
    const int4* payload =
        reinterpret_cast<const int4*>(static_cast<const char*>(p.x) + static_cast<size_t>(t) * p.row_bytes);
    warp_copy_row_to_lanes<RowLoad::kReadOnly>(payload, vectors, readers, reinterpret_cast<int4*>(body));
    for (unsigned rest = readers; rest != 0; rest &= rest - 1) {
      const int owner = __ffs(rest) - 1;
      ht_dispatch_send::write_slot_extras<false>(
          p, t, node_begin(g) + owner,
          reinterpret_cast<char*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(body), owner)));
    }
    if (row >= 0) ++w.tail;
    if (__any_sync(0xffffffffu, w.tail - w.published >= batch)) w.publish(c.transport);
  }
  // The step's end: a header with source -1 in every ring.
  if (!w.wait_space(c.transport, w.active, wait)) return false;
  if (w.active) {
    *reinterpret_cast<int4*>(w.slot(c.transport)) = make_int4(-1, -1, -1, g.node_of(g.rank));
    ++w.tail;
  }
  w.publish(c.transport);
  if (w.active) w.save(saved);
  return true;
}

// Receiving warp (writer, channel): every slot of its ring up to the writer's end, one credit
// for several slots (ht_ring_signal_batch) and never held back while it waits. Lane 0 holds
// the ring's end (an HtRingLaneReader of one active lane); the warp copies each row.
__device__ __forceinline__ bool receive(const HtDispatchParams& p, uint64_t, const WarpRole& role) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int channels = static_cast<int>(p.rings.channels);
  if (role.index >= g.node_size * channels) return true;
  const int writer = node_begin(g) + role.index / channels, channel = role.index % channels;
  HtRingLaneReader r{};
  r.active = lane_id() == 0;
  uint64_t* saved = nullptr;
  if (r.active) {
    r.place = ring_place(p, writer, g.rank, channel);
    saved = static_cast<uint64_t*>(c.transport.local(p.rings.reader_state(writer - node_begin(g), channel)));
    r.restore(saved);
  }
  const uint64_t batch = ht_ring_signal_batch(p.rings);
  const RingWait wait{c.timeout_ns, c.error, kPhaseHtRingData};
  bool ok = true;
  for (;;) {
    if (!r.wait_data(c.transport, r.active, wait)) {
      ok = false;
      break;
    }
    const char* slot = reinterpret_cast<const char*>(
        __shfl_sync(0xffffffffu, r.active ? reinterpret_cast<uintptr_t>(r.slot(c.transport)) : 0, 0));
    int4 header = make_int4(0, 0, 0, 0);  // HtRingHeader: source, row, token, node
    if (r.active) header = __ldcg(reinterpret_cast<const int4*>(slot));
    const int source = __shfl_sync(0xffffffffu, header.x, 0), row = __shfl_sync(0xffffffffu, header.y, 0);
    if (source == -1) {  // the writer's end of the step
      if (r.active) ++r.head;
      break;
    }
    // A header naming a rank outside the node, or a row past the source's, is never written
    // by a writer of this dispatch: reported, and nothing is written out of bounds.
    if (source < node_begin(g) || source >= node_begin(g) + g.node_size || row < 0 ||
        row >= c.handle.recv_count[source]) {
      if (r.active) report_failure(c.error, EPC_ERR_INTERNAL, kPhaseHtRingData, g.rank, writer, 0);
      ok = false;
      break;
    }
    const int out_row = c.handle.recv_base[source] + row;
    ht_dispatch_recv::copy_row(p, slot + sizeof(HtRingHeader), out_row);
    // Combine returns the row through its rings in its token's order (ht_combine_rings.cuh).
    if (r.active) {
      c.handle.ring_tokens[out_row] = header.z;
      ++r.head;
    }
    if (__any_sync(0xffffffffu, r.head - r.credited >= batch)) r.give_credit(c.transport);
  }
  r.give_credit(c.transport);
  if (r.active) r.save(saved);
  return ok;
}

}  // namespace epc::kernels::ht_dispatch_rings
