// SPDX-License-Identifier: Apache-2.0
// High-throughput dispatch over credit rings inside a node (issue 27, step C; the protocol is
// kernels/wire/ht_ring.hpp's and kernels/ht/ht_ring.cuh's). Rows then need no [R][T] slots:
// each rank writes its rows for every rank of the node, itself included, into the ring
// (writer, reader, channel g) of the reader's window, tokens t with t % G == g in token
// order, each slot a header naming (source, row) and the dispatch slot's bytes. After its
// last token the writer publishes a header with source -1 into each of its rings, which ends
// the reader's step. One warp owns each ring end: sending warp g writes the G-th channel's
// rings, receiving warp (w, g) reads ring (w, g) and places each row where the flat layout's
// receiving part would (recv_base[source] + row). A reader waits on its one ring only, and
// its writer's other rings have readers of their own, so every ring drains: the launch must
// be fused (every warp resident), which the handle checks.
//
// Served for the FLAT layout on groups of one node, when the group's configuration forces
// rings (core/ht/ht_rings.hpp says how); every other dispatch runs ht_dispatch_send.cuh and
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

static_assert(kHtWarps == kHtBlockWarps, "the host counts a block's warps as kHtBlockWarps (check_ht_rings_served)");

__device__ __forceinline__ int node_begin(const HtGeometry& g) { return g.node_of(g.rank) * g.node_size; }

// Ring (writer, reader, channel) as both of its ends see it.
__device__ __forceinline__ HtRingPlace ring_place(const HtDispatchParams& p, int writer, int reader, int channel) {
  const HtGeometry& g = p.common.geo;
  const HtRingArea& a = p.rings;
  const int w = writer - node_begin(g), y = reader - node_begin(g);
  return HtRingPlace{
      a.slots(w, channel), a.tail_word(w, channel), a.head_word(y, channel), a.slot_bytes, a.capacity, writer, reader};
}

// Lane 0's view of two counters this rank keeps in its own window.
__device__ __forceinline__ void load_counters(const PeerTransport& t, uint64_t offset, uint64_t& first,
                                              uint64_t& second) {
  const uint64_t* words = static_cast<const uint64_t*>(t.local(offset));
  first = __shfl_sync(0xffffffffu, lane_id() == 0 ? __ldcg(words) : 0, 0);
  second = __shfl_sync(0xffffffffu, lane_id() == 0 ? __ldcg(words + 1) : 0, 0);
}
__device__ __forceinline__ void store_counters(const PeerTransport& t, uint64_t offset, uint64_t first,
                                               uint64_t second) {
  if (lane_id() != 0) return;
  uint64_t* words = static_cast<uint64_t*>(t.local(offset));
  __stcg(words, first);
  __stcg(words + 1, second);
}

// The whole warp: one slot into the ring to `reader` (its header, then for a row the
// dispatch slot: payload, scales, the reader's entries). Returns false when the wait for
// space failed (recorded in the group's error).
__device__ __forceinline__ bool write_slot(const HtDispatchParams& p, int reader, int channel, const RingWait& wait,
                                           int t, int row) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const uint64_t state = p.rings.writer_state(reader - node_begin(g), channel);
  HtRingWriter writer{ring_place(p, g.rank, reader, channel), 0, 0};
  load_counters(c.transport, state, writer.tail, writer.head_seen);
  if (!writer.wait_space(c.transport, wait)) return false;
  char* slot = writer.slot(c.transport);
  if (lane_id() == 0) {
    *reinterpret_cast<int4*>(slot) =
        row >= 0 ? make_int4(g.rank, row, t, g.node_of(g.rank)) : make_int4(-1, -1, -1, g.node_of(g.rank));
  }
  uint32_t bytes = sizeof(HtRingHeader);
  if (row >= 0) {
    char* body = slot + sizeof(HtRingHeader);
    const int4* payload =
        reinterpret_cast<const int4*>(static_cast<const char*>(p.x) + static_cast<size_t>(t) * p.row_bytes);
    warp_copy_row_segmented<RowLoad::kReadOnly>(reinterpret_cast<int4*>(body), payload, p.row_bytes / 16);
    ht_dispatch_send::write_slot_extras<false>(p, t, reader, body);
    bytes += g.dispatch_slot.bytes;
  }
  __syncwarp();  // every lane's stores before publish's signal
  writer.publish(c.transport, bytes);
  store_counters(c.transport, state, writer.tail, writer.head_seen);
  return true;
}

// Sending warp `channel`: its tokens' rows, then the step's end, into every rank of the node.
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
  const int channel = role.index, begin = node_begin(g), end = begin + g.node_size;
  for (int t = channel; t < c.num_tokens; t += channels) {
    const int32_t* rows = c.handle.token_row + static_cast<size_t>(t) * g.nranks;
    for (int reader = begin; reader < end; ++reader) {
      const int row = rows[reader];
      if (row >= 0 && !write_slot(p, reader, channel, wait, t, row)) return false;
    }
  }
  for (int reader = begin; reader < end; ++reader) {
    if (!write_slot(p, reader, channel, wait, -1, -1)) return false;
  }
  return true;
}

// Receiving warp (writer, channel): every slot of its ring up to the writer's end.
__device__ __forceinline__ bool receive(const HtDispatchParams& p, uint64_t, const WarpRole& role) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int channels = static_cast<int>(p.rings.channels);
  if (role.index >= g.node_size * channels) return true;
  const int writer = node_begin(g) + role.index / channels, channel = role.index % channels;
  const uint64_t state = p.rings.reader_state(writer - node_begin(g), channel);
  HtRingReader reader{ring_place(p, writer, g.rank, channel), 0, 0};
  load_counters(c.transport, state, reader.head, reader.tail_seen);
  const RingWait wait{c.timeout_ns, c.error, kPhaseHtRingData};
  bool ok = true;
  for (;;) {
    if (!reader.wait_data(c.transport, wait)) {
      ok = false;
      break;
    }
    const char* slot = reader.slot(c.transport);
    int2 header = make_int2(0, 0);  // (source, row)
    if (lane_id() == 0) header = __ldcg(reinterpret_cast<const int2*>(slot));
    const int source = __shfl_sync(0xffffffffu, header.x, 0), row = __shfl_sync(0xffffffffu, header.y, 0);
    if (source == -1) {  // the writer's end of the step
      reader.release(c.transport);
      break;
    }
    // A header naming a rank outside the node, or a row past the source's, is never written
    // by a writer of this dispatch: reported, and nothing is written out of bounds.
    if (source < node_begin(g) || source >= node_begin(g) + g.node_size || row < 0 ||
        row >= c.handle.recv_count[source]) {
      if (lane_id() == 0) report_failure(c.error, EPC_ERR_INTERNAL, kPhaseHtRingData, g.rank, writer, 0);
      ok = false;
      break;
    }
    ht_dispatch_recv::copy_row(p, slot + sizeof(HtRingHeader), c.handle.recv_base[source] + row);
    reader.release(c.transport);
  }
  store_counters(c.transport, state, reader.head, reader.tail_seen);
  return ok;
}

}  // namespace epc::kernels::ht_dispatch_rings
