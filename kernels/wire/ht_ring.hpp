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
  int32_t source;  // the token's source rank
  int32_t row;     // dispatch: its row among the source's rows for the destination (-1: none)
  int32_t token;   // the source's token index
  int32_t node;    // combine: the source's node; dispatch: the writer's node
};
static_assert(sizeof(HtRingHeader) == 16, "ring headers keep a slot's payload 16-byte aligned");

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
