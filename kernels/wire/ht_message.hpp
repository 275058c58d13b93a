// SPDX-License-Identifier: Apache-2.0
// The byte layout of high-throughput rows in the symmetric window, shared by the planner
// (which sizes the regions) and the kernels (which write and read them).
//
// Dispatch: source rank s writes the j-th token it sends to rank d (j counts s's tokens for
// d in token order) into d's slot [s][j] (with a receive capacity below R * T, into d's
// compact slot of row j of s: ht_capacity.hpp):
//   row      the payload: H 16-bit values, H e4m3 bytes or H / 2 e2m1 pairs (a multiple
//            of 16 bytes)
//   scales   passthrough payloads only: the token's scale bytes (any dtype and count), from
//            ht_scales_offset(row bytes); row and scales share the slot's payload area
//            (ht_payload_bytes), which holds any row plus scales up to max_token_bytes
//   topk     K int32: the local expert id of entry k where its expert is on d, else -1
//   weights  K fp32: the weight of entry k where local, else 0
// For EXPERT_PACKED handles, topk holds instead entry k's place q among s's entries for d in
// (local expert, token, slot) order (-1 where not local): d finds the expert from the counts
// per expert it received from s, and the entry's row from the expert's zone.
// Combine: rank d returns the row it received at [s][j] into s's slot [d][j]:
//   row      H bf16
//   weights  K fp32 (carried only where dispatch receives out_topk_weights)
// Across nodes (node size S), a row for a source s in another node goes instead to s's
// rail peer p in d's node, into p's slot [d's rail peer in s's node][j] (a rank of s's node,
// which never writes to p itself); p sums its node's rows for each of s's tokens t and puts
// the one partial row into s's slot [p][t] (indexed by token, not row). So at rank y,
// slots [x][.] hold: for x in y's node, the rows x returned for y's tokens; for x = y's
// rail peer in another node, that node's partials for y's tokens; for any other x in a node
// A, the rows that y's node-mate with x's local index returned for y's rail peer in A.
//
// Work moves in chunks of kHtChunkTokens: dispatch publishes each chunk of source tokens
// with one flag per destination, combine each chunk of returned rows with one flag.
#pragma once

#include <cstdint>

#include "kernels/wire/limits.hpp"

namespace epc::kernels {

constexpr uint64_t ht_align16(uint64_t bytes) { return (bytes + 15) / 16 * 16; }

struct HtDispatchSlot {
  uint32_t topk_offset;  // = the payload area's bytes
  uint32_t weights_offset;
  uint32_t bytes;
};

// Where a slot's scales start after a row of `row_bytes`.
constexpr uint32_t ht_scales_offset(uint32_t row_bytes) { return static_cast<uint32_t>(ht_align16(row_bytes)); }

// Bytes of a slot's payload area. At least 2.0's: a row of the group's element size
// (`element_bytes`: 2 for groups of a 16-bit dtype, 1 for fp8 groups) and H/128 fp32
// scales. `max_token_bytes` (0: none) can ask for more: every row the kernels carry is a
// multiple of 16 bytes (2H, e4m3 H with H % 16 == 0, e2m1 H / 2 with H % 32 == 0), so a row
// and scales of at most max_token_bytes in all, the scales from ht_scales_offset, take at
// most align16(max_token_bytes). The default (2H) and 2.0's fp8 sizes (H + H/32, H % 128 ==
// 0) fit in 2.0's area, which therefore does not change.
constexpr uint64_t ht_payload_bytes(uint32_t hidden, uint32_t element_bytes, uint64_t max_token_bytes) {
  const uint64_t row = ht_align16(uint64_t{hidden} * element_bytes);
  const uint64_t scales = ht_align16(uint64_t{(hidden + kFp8BlockChannels - 1) / kFp8BlockChannels} * 4);
  const uint64_t asked = ht_align16(max_token_bytes);
  return row + scales > asked ? row + scales : asked;
}

constexpr HtDispatchSlot ht_dispatch_slot(uint32_t hidden, uint32_t element_bytes, uint32_t max_topk,
                                          uint64_t max_token_bytes = 0) {
  const uint64_t payload = ht_payload_bytes(hidden, element_bytes, max_token_bytes);
  const uint64_t topk = ht_align16(uint64_t{max_topk} * 4);
  return HtDispatchSlot{static_cast<uint32_t>(payload), static_cast<uint32_t>(payload + topk),
                        static_cast<uint32_t>(payload + 2 * topk)};
}

struct HtCombineSlot {
  uint32_t weights_offset;
  uint32_t bytes;
};

constexpr HtCombineSlot ht_combine_slot(uint32_t hidden, uint32_t max_topk) {
  const uint64_t row = ht_align16(uint64_t{hidden} * 2);
  return HtCombineSlot{static_cast<uint32_t>(row), static_cast<uint32_t>(row + ht_align16(uint64_t{max_topk} * 4))};
}

// Across nodes, a source sends each token once to its rail peer in every other node that
// hosts one of the token's experts (the rank with the source's local index there), into
// that peer's rail slot [source node][token]: a dispatch slot whose topk and weights hold
// the token's global expert ids and weights for every entry, followed by the token's row
// on each rank of the peer's node (-1 where it has no entry) and, for EXPERT_PACKED
// handles, each entry's place q among the source's entries for the rank hosting its expert
// (max_topk int32 from ht_rail_positions_offset, -1 where masked: what a direct slot's topk
// holds for that rank; FLAT handles leave them unwritten). The peer forwards it into those ranks' dispatch slots as
// if the source had written them.
struct HtRailSlot {
  uint32_t rows_offset;  // node_size int32, then the places (ht_rail_positions_offset)
  uint32_t bytes;
};

// Where a rail slot's entry places (max_topk int32) start. Derived rather than a field:
// HtRailSlot is part of every HT kernel's parameters, whose one-node kernels compile to the
// same registers and spills only while those keep their size.
constexpr uint32_t ht_rail_positions_offset(const HtRailSlot& rail, uint32_t node_size) {
  return static_cast<uint32_t>(rail.rows_offset + ht_align16(uint64_t{node_size} * 4));
}

constexpr HtRailSlot ht_rail_slot(const HtDispatchSlot& dispatch, uint32_t node_size, uint32_t max_topk) {
  const HtRailSlot rows{dispatch.bytes, 0};
  return HtRailSlot{dispatch.bytes, static_cast<uint32_t>(ht_rail_positions_offset(rows, node_size) +
                                                          ht_align16(uint64_t{max_topk} * 4))};
}

// Chunks a stream of `items` tokens or rows is cut into.
constexpr int ht_chunks(int items) { return (items + kHtChunkTokens - 1) / kHtChunkTokens; }

// Named offsets into a [streams][max_tokens] area of fixed-size slots and its chunk flags
// (a stream is a source rank, a destination rank or a node). Planner and kernels alike
// compute window addresses through these.
//
// Slot `row` of `stream`, in an area of slots of `slot_bytes` starting at `data_offset`.
constexpr uint64_t ht_slot_offset(uint64_t data_offset, int stream, int row, int max_tokens, uint32_t slot_bytes) {
  return data_offset + (static_cast<uint64_t>(stream) * max_tokens + row) * slot_bytes;
}
// Slot `first + row` of such an area: a dispatch window's slots, where `first` is the
// stream's first slot (ht_capacity.hpp: stream * max_tokens, or compact).
constexpr uint64_t ht_window_slot_offset(uint64_t data_offset, int first, int row, uint32_t slot_bytes) {
  return data_offset + (static_cast<uint64_t>(first) + static_cast<uint64_t>(row)) * slot_bytes;
}
// The uint64 flag of chunk `chunk` of `stream`, in flags starting at `flags_offset`.
constexpr uint64_t ht_chunk_flag_word(uint64_t flags_offset, int stream, int chunk, int max_tokens) {
  return flags_offset + (static_cast<uint64_t>(stream) * ht_chunks(max_tokens) + chunk) * sizeof(uint64_t);
}
// A chunk flag's value (kernels/device/chunk_flag.cuh): "chunk c of step e has landed, and it
// covers rows [start, end)" in one uint64, the epoch in the top kHtChunkEpochBits bits, start
// and end kHtChunkRowBits bits each (a rail flag's start is its token mask). A writer rewrites
// a flag only in steps that have its chunk, so a word may keep an old step's value, or a new
// window's zero, for any number of steps: the epoch is never 0, so a zeroed word never
// matches, and repeats only every kHtChunkEpochPeriod (2^29) steps.
constexpr int kHtChunkRowBits = 17;
constexpr int kHtChunkEpochBits = 64 - 2 * kHtChunkRowBits;
constexpr uint64_t kHtChunkRowMask = (uint64_t{1} << kHtChunkRowBits) - 1;
constexpr uint64_t kHtChunkEpochPeriod = uint64_t{1} << (kHtChunkEpochBits - 1);
static_assert(static_cast<uint64_t>(kMaxHtTokens) <= kHtChunkRowMask,
              "a chunk flag holds every row bound of a stream of kMaxHtTokens");
static_assert(kHtChunkTokens <= kHtChunkRowBits, "a rail flag's token mask fits the start field");
static_assert(2 * kHtChunkEpochPeriod == (uint64_t{1} << kHtChunkEpochBits), "every epoch fits its field");
// Step `step`'s epoch: kHtChunkEpochPeriod .. 2 kHtChunkEpochPeriod - 1, never 0.
constexpr uint64_t ht_chunk_epoch(uint64_t step) { return (step & (kHtChunkEpochPeriod - 1)) | kHtChunkEpochPeriod; }
constexpr uint64_t ht_chunk_flag(uint64_t step, uint32_t start, uint32_t end) {
  return (ht_chunk_epoch(step) << (2 * kHtChunkRowBits)) | (uint64_t{start} << kHtChunkRowBits) | uint64_t{end};
}
constexpr uint64_t ht_chunk_flag_epoch(uint64_t value) { return value >> (2 * kHtChunkRowBits); }
constexpr int ht_chunk_flag_start(uint64_t value) {
  return static_cast<int>((value >> kHtChunkRowBits) & kHtChunkRowMask);
}
constexpr int ht_chunk_flag_end(uint64_t value) { return static_cast<int>(value & kHtChunkRowMask); }
// Bytes of the chunk flags of `streams` streams; a signal region's acknowledgements follow.
constexpr uint64_t ht_chunk_flags_bytes(int streams, int max_tokens) {
  return static_cast<uint64_t>(streams) * ht_chunks(max_tokens) * sizeof(uint64_t);
}
// The uint64 word rank `rank` writes in an [nranks] array of acknowledgements or signals.
constexpr uint64_t ht_ack_word(uint64_t acks_offset, int rank) {
  return acks_offset + static_cast<uint64_t>(rank) * sizeof(uint64_t);
}

// Words one source writes into a destination's layout slot: tokens it sends there, its
// batch size B, then its entry count for each of the destination's local experts.
constexpr uint32_t kHtLayoutHeaderWords = 2;

}  // namespace epc::kernels
