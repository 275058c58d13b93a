// SPDX-License-Identifier: Apache-2.0
// Credit rings for the high-throughput streams that cross nodes (issue 27, step C): the
// index and credit arithmetic, and the header that places each row. The CPU model of the
// protocol (tests/unit/ht_ring_model.hpp) and the rings' device ends
// (kernels/ht/ht_ring.cuh) run on exactly these, so the kernels that adopt the rings
// inherit what the model proved; no HT kernel uses them yet.
//
// A ring carries one stream from a writer to a reader, per channel (tokens t with
// t % channels == channel), in `capacity` slots held at the reader. Two 64-bit counters,
// never reset (graph replays and later steps keep counting):
//   tail  slots written; advanced by the writer after the slot's bytes (across nodes a GIN
//         signal add behind the put, so the reader sees it only after the bytes landed)
//   head  slots consumed; advanced by the reader after it copied the slot out (the writer's
//         credit: across nodes a signal add back, which also proves the put's source read)
// Both only grow, and each side tests "at least" on its view of the other's, so a stale
// view only delays, never misleads (kernels/transport/peer_transport.cuh's rule 2).
// Slot n of the stream lives at index n % capacity.
#pragma once

#include <cstdint>

namespace epc::kernels {

// The first 16 bytes of every ring slot: which row it is, so rows arriving through rings in
// any order still land where the reference puts them. Dispatch places the row at
// recv_base[source] + row of the slot's destination; combine checks it against the key it
// expects (rows travel in key order).
struct HtRingHeader {
  int32_t source;  // the token's source rank; dispatch: -1 ends the writer's slots of a step
  int32_t row;     // dispatch: its row among the source's rows for the destination (-1: none)
  int32_t token;   // the source's token index
  int32_t node;    // combine: the source's node; dispatch: the writer's node
};
static_assert(sizeof(HtRingHeader) == 16, "ring headers keep a slot's payload 16-byte aligned");

// The rings of one node for dispatch or for combine, at the same offsets in every rank's window
// (a rank is a reader of S * G rings and a writer of S * G: S ranks per node, G channels, C
// slots each),
// and the named offsets of every word and slot. Each rank keeps its ends' counters in its own
// window too (never reset, like the words), so that launches, steps and graph replays go on
// counting where the last one stopped. Every offset is 16-byte aligned past `base` (which the
// host aligns), so a slot's payload starts 16-byte aligned behind its header.
struct HtRingArea {
  uint64_t base;        // 0 with capacity 0: no rings
  uint32_t node_size;   // S
  uint32_t channels;    // G
  uint32_t capacity;    // C slots per ring (0: no rings)
  uint32_t slot_bytes;  // a header (HtRingHeader) and a dispatch or combine slot

  constexpr uint64_t rings() const { return uint64_t{node_size} * channels; }
  // Reader's window: ring (writer local index w, channel g)'s tail, signalled by the writer.
  constexpr uint64_t tail_word(int w, int g) const { return base + (uint64_t(w) * channels + g) * 8; }
  // Writer's window: ring (reader local index y, channel g)'s head, signalled by the reader.
  constexpr uint64_t head_word(int y, int g) const { return base + (rings() + uint64_t(y) * channels + g) * 8; }
  // This rank's own counters: as writer of the ring to reader y, its tail and the head it last
  // saw; as reader of the ring from writer w, its head and the tail it last saw.
  constexpr uint64_t writer_state(int y, int g) const {
    return base + (2 * rings() + (uint64_t(y) * channels + g) * 2) * 8;
  }
  constexpr uint64_t reader_state(int w, int g) const {
    return base + (4 * rings() + (uint64_t(w) * channels + g) * 2) * 8;
  }
  // Reader's window: ring (w, g)'s first slot; slot i follows at i * slot_bytes.
  constexpr uint64_t slots(int w, int g) const {
    return base + 6 * rings() * 8 + (uint64_t(w) * channels + g) * capacity * slot_bytes;
  }
  constexpr uint64_t bytes() const { return 6 * rings() * 8 + rings() * capacity * slot_bytes; }
};

// Ranks per node the rings serve: a writer warp holds one reader's ring per lane
// (kernels/ht/ht_dispatch_rings.cuh).
constexpr int kHtRingMaxNodeSize = 32;

constexpr uint32_t ht_ring_slot_bytes(uint32_t slot_bytes) {
  return static_cast<uint32_t>(sizeof(HtRingHeader)) + slot_bytes;
}

constexpr uint64_t ht_ring_index(uint64_t counter, uint32_t capacity) { return counter % capacity; }
// The writer may fill slot `tail` once the reader has consumed slot tail - capacity.
constexpr bool ht_ring_has_space(uint64_t tail, uint64_t head_seen, uint32_t capacity) {
  return tail - head_seen < capacity;
}
// The reader may consume slot `head` once the writer has published it.
constexpr bool ht_ring_has_data(uint64_t tail_seen, uint64_t head) { return head < tail_seen; }
constexpr int ht_ring_channel(int token, int channels) { return token % channels; }
// Combine's global key order, the same at every consumer: token first, then the source's
// node. Every consumer takes its keys in this order, so the smallest unfinished key of the
// system can always progress (rows for it only wait on smaller keys).
constexpr uint64_t ht_ring_key(int token, int source_node) {
  return (static_cast<uint64_t>(token) << 32) | static_cast<uint32_t>(source_node);
}

}  // namespace epc::kernels
