// SPDX-License-Identifier: Apache-2.0
// Where a rank stages what it sends to ranks of other nodes: the staging map. Shared by the
// planner (core/staging_plan.cpp fills it and sizes EPC_REGION_NET_STAGING from it) and the
// transport (kernels/transport/peer_transport.cuh looks staged addresses up in it).
//
// Why staging at all: an NCCL 2.28.9 GIN put reads its source from a window registered on
// the communicator (a (window, offset) pair on the sender), so bytes bound for another node
// are first written into this rank's own window and put from there.
//
// What is staged: a peer of another node receives only rows of "peer-written arrays",
// [rows][row_stride] blocks of its window whose row r is written by rank r (or by the ranks
// of node r) and by nobody else. A writer therefore only ever sends its own row of each
// array, and stages just that row: once per destination, or once for all of them where
// every destination gets the same bytes:
//
//   net_staging = [remote_ranks] rank blocks, [remote_nodes] rail blocks, one shared block
//   rank block   one per rank outside the writer's node, in world-rank order: the writer's
//                row of every array it writes to every rank (StagedFor::kEveryRemoteRank)
//   rail block   one per other node, in node order: the writer's row of every array it
//                writes only to its rail peer there, the rank with its own local index
//                (StagedFor::kRemoteRailPeer; high-throughput rail slots and partials)
//   shared block the writer's row of every array whose bytes are the same for every rank
//                of another node it sends them to, staged once and put to each of them
//                (StagedFor::kOnceForRemoteRanks; low-latency dispatch payloads: a token's
//                row is the same bytes wherever it goes)
//
// A row may be a run of records of which an array owns one part: a low-latency message is
// a header (it differs per destination: the token's entries there) and a payload (it does
// not), so the messages row is two arrays, the headers staged per destination and the
// payloads once. An array stages only its part of each record, packed, each part
// starting 16-byte aligned (parts are multiples of 16).
//
// Inside a block every array has its row at the same place (StagedArray::staged), each row
// starting 16-byte aligned; so the byte `column` of part `record` of the writer's row of
// array a (StagedParts; 0 for arrays staged whole), bound for peer p, is staged at
//   offset + block(p) + a.staged + record * a.part_bytes + column
// (block(p) the same for every p in the shared block). Writes of 16-byte vectors stay
// 16-byte aligned on both ends when the window row is, and the last value signalled into a
// word (peer_transport.cuh) has a staged word of its own. Named getters below compute every
// such offset; neither side does its own arithmetic.
#pragma once

#include <cstdint>

#include "kernels/wire/limits.hpp"

namespace epc::kernels {

// What a staged array is, for named lookups (StagingMap::array) and diagnostics.
enum class Staged : uint32_t {
  kBarrierInbox = 0,       // control region: [nranks] uint64 epochs
  kLlMessageHeaders = 1,   // dispatch_recv[slot]: [nranks][max_tokens] messages, their headers
  kLlCounts = 2,           // dispatch_recv[slot]: [nranks][local_experts] int32 behind them
  kLlDispatchSignals = 3,  // dispatch_signal[slot]: [nranks][kLlSignalRowWords] uint64
  kLlCombineRows = 4,      // combine_recv[slot]: [nranks][max_tokens] bf16 rows ([..][max_entries] per entry)
  kLlCombineSignals = 5,   // combine_signal[slot]
  kHtLayoutSignals = 6,    // layout[slot]: [nranks] uint64
  kHtLayoutRound2Signals = 7,
  kHtLayoutWords = 8,  // layout[slot]: [nranks][ht_layout_words] int32
  kHtLayoutRound2Words = 9,
  kHtDispatchAcks = 10,  // dispatch_signal: [nranks] uint64 behind the chunk flags
  kHtCombineAcks = 11,
  kHtRailRows = 12,         // rail_recv: [nodes][max_tokens] rail slots
  kHtRailFlags = 13,        // rail_signal: [nodes][chunks] uint64
  kHtCombinePartials = 14,  // combine_recv: [nranks][max_tokens] combine slots (rail peers only)
  kHtCombineFlags = 15,     // combine_signal: [nranks][chunks] uint64 (rail peers only)
  kLlMessagePayloads = 16,  // dispatch_recv[slot]: the same messages' payloads (staged once)
  // combine_recv with EPC_GROUP_COMBINE_PER_ENTRY: [nranks][max_tokens * max_topk] combine
  // slots, one per (token, entry) (EPC_WEIGHTING_HOME; rail peers only). The per-rank
  // partials above stay an array of their own: the other weightings write [nranks][max_tokens]
  // slots at the region's start. Writer 0's partial row lies inside its entry row, and the
  // map looks the partials up first, so its entry slots there are staged in its partial row.
  kHtCombineEntries = 17,
};

enum class StagedFor : uint32_t { kEveryRemoteRank = 0, kRemoteRailPeer = 1, kOnceForRemoteRanks = 2 };
enum class RowOf : uint32_t { kRank = 0, kNode = 1 };

constexpr uint32_t kNoStagingSlot = 0xffffffffu;
constexpr uint64_t kNotStaged = ~uint64_t{0};
constexpr uint64_t kStagedRowAlignment = 16;
// A low-latency plan stages the barrier inbox and four whole-row arrays per slot, and two
// arrays of record parts (a message's header and payload); a high-throughput plan fifteen
// whole-row arrays, sixteen with EPC_GROUP_COMBINE_PER_ENTRY.
constexpr int kMaxStagedArrays = 16;
constexpr int kLlStagedArraysPerSlot = 4;
constexpr int kLlStagedPartsPerSlot = 2;
constexpr int kMaxStagedParts = kLlStagedPartsPerSlot * kLlMaxSlots;
static_assert(1 + kLlStagedArraysPerSlot * kLlMaxSlots <= kMaxStagedArrays,
              "every low-latency plan's arrays fit the staging map");

// Rows of several records are shorter than this (StagedParts::staged_column divides their
// 16-byte units in 32 bits).
constexpr uint64_t kMaxStagedRecordRowBytes = uint64_t{1} << 36;

constexpr uint64_t staged_align(uint64_t bytes) {
  return (bytes + kStagedRowAlignment - 1) / kStagedRowAlignment * kStagedRowAlignment;
}

// An array whose writer's row is staged whole.
struct StagedArray {
  uint64_t offset;      // window offset of row 0
  uint64_t row_stride;  // bytes from one row to the next
  uint64_t row_bytes;   // bytes of a row its writer fills
  uint64_t staged;      // where the writer's row (or its packed parts) starts inside each block
  Staged name;
  uint32_t slot;  // the plan slot of the array's region, kNoStagingSlot when unslotted
  RowOf row_of;
  StagedFor staged_for;

  // Window offset of the row that rank `writer` (of node `writer_node`) writes.
  constexpr uint64_t writer_row(int writer, int writer_node) const {
    return offset + static_cast<uint64_t>(row_of == RowOf::kNode ? writer_node : writer) * row_stride;
  }
};

// An array whose writer's row is a run of records of `record_stride` bytes, of which the
// array owns bytes [part_begin, part_begin + part_bytes) of each, staged packed: part k at
// rows.staged + k * part_bytes. Records and parts are multiples of 16 bytes, rows shorter
// than kMaxStagedRecordRowBytes (the planner checks all three).
struct StagedParts {
  StagedArray rows;  // rows.row_bytes: the whole row of records
  uint64_t record_stride;
  uint64_t part_begin;
  uint64_t part_bytes;

  constexpr uint64_t records() const { return rows.row_bytes / record_stride; }
  // Bytes the array stages of a writer's row (per destination, or once).
  constexpr uint64_t staged_bytes() const { return records() * part_bytes; }
  // Where byte `within` of the writer's row is staged, from rows.staged, or kNotStaged when
  // it is outside the array's part of its record. A 32-bit division: a 64-bit one is a
  // call, and registers the lookup's callers would pay for.
  constexpr uint64_t staged_column(uint64_t within) const {
    const uint64_t record = static_cast<uint32_t>(within >> 4) / static_cast<uint32_t>(record_stride >> 4);
    const uint64_t column = within - record * record_stride - part_begin;
    return column < part_bytes ? record * part_bytes + column : kNotStaged;
  }
};

// Plain data: the plan holds one (rank-independent), and group creation copies it into
// device memory beside the window, where the transport reads it (kernels/wire/transport.hpp).
struct StagingMap {
  StagedArray arrays[kMaxStagedArrays];
  uint32_t count;
  uint32_t remote_ranks;  // rank blocks: ranks outside a node
  uint32_t remote_nodes;  // rail blocks: nodes other than one's own
  uint32_t node_size;
  uint64_t offset;            // window offset of the net_staging region (0: one node, no staging)
  uint64_t rank_block_bytes;  // a multiple of kStagedRowAlignment
  uint64_t rail_block_bytes;
  uint64_t shared_block_bytes;  // the one shared block
  StagedParts parts[kMaxStagedParts];
  uint32_t part_count;
  uint32_t reserved;

  // Bytes the region holds (before the plan rounds it to kRegionAlignment).
  constexpr uint64_t bytes() const {
    return uint64_t{remote_ranks} * rank_block_bytes + uint64_t{remote_nodes} * rail_block_bytes + shared_block_bytes;
  }
  // Window offset of the block for the `remote`-th rank outside the writer's node (world
  // order, the node skipped), or for the rail peer of the `remote_node`-th other node.
  constexpr uint64_t rank_block(uint32_t remote) const { return offset + uint64_t{remote} * rank_block_bytes; }
  constexpr uint64_t rail_block(uint32_t remote_node) const {
    return offset + uint64_t{remote_ranks} * rank_block_bytes + uint64_t{remote_node} * rail_block_bytes;
  }
  // Window offset of the shared block, after every rank and rail block.
  constexpr uint64_t shared_block() const {
    return offset + uint64_t{remote_ranks} * rank_block_bytes + uint64_t{remote_nodes} * rail_block_bytes;
  }
  // Those indices of `peer`, a rank outside the node of `writer`.
  constexpr uint32_t remote_rank_index(int writer, int peer) const {
    const int begin = writer / static_cast<int>(node_size) * static_cast<int>(node_size);
    return static_cast<uint32_t>(peer < begin ? peer : peer - static_cast<int>(node_size));
  }
  constexpr uint32_t remote_node_index(int writer, int peer) const {
    const int own = writer / static_cast<int>(node_size), theirs = peer / static_cast<int>(node_size);
    return static_cast<uint32_t>(theirs < own ? theirs : theirs - 1);
  }
  // Window offset where `writer` stages the start of its row of `a` bound for `peer` (the
  // same for every peer when `a` is staged once).
  constexpr uint64_t staged_row(const StagedArray& a, int writer, int peer) const {
    if (a.staged_for == StagedFor::kOnceForRemoteRanks) return shared_block() + a.staged;
    return staged_row_apart(a, writer, peer);
  }
  // The same for an array staged per destination (every whole-row array of a plan).
  constexpr uint64_t staged_row_apart(const StagedArray& a, int writer, int peer) const {
    const uint64_t block = a.staged_for == StagedFor::kRemoteRailPeer ? rail_block(remote_node_index(writer, peer))
                                                                      : rank_block(remote_rank_index(writer, peer));
    return block + a.staged;
  }

  // The array of `name` in plan slot `slot` (its rows, for an array of record parts);
  // nullptr when the plan stages none.
  constexpr const StagedArray* array(Staged name, uint32_t slot = kNoStagingSlot) const {
    for (uint32_t i = 0; i < count; ++i) {
      if (arrays[i].name == name && arrays[i].slot == slot) return &arrays[i];
    }
    const StagedParts* p = parts_of(name, slot);
    return p != nullptr ? &p->rows : nullptr;
  }
  constexpr const StagedParts* parts_of(Staged name, uint32_t slot = kNoStagingSlot) const {
    for (uint32_t i = 0; i < part_count; ++i) {
      if (parts[i].rows.name == name && parts[i].rows.slot == slot) return &parts[i];
    }
    return nullptr;
  }

  // Window offset where `writer` stages its byte at `window_offset` of `peer`'s window (a
  // rank outside the writer's node), or kNotStaged when that byte is in no row the writer
  // owns: a planner bug, which the staging map's unit tests rule out for every kernel
  // write. Rows are staged whole and a record's parts each in one piece: a put never spans
  // two. The whole rows (one compare per array; staged per destination), then the record
  // parts (a division each). The device looks the two up apart
  // (kernels/transport/peer_transport.cuh): only low-latency dispatch writes record parts,
  // and the division's registers would otherwise weigh on every kernel's lookups.
  constexpr uint64_t staged_offset(uint64_t window_offset, int writer, int peer) const {
    const uint64_t at = staged_row_offset(window_offset, writer, peer);
    return at != kNotStaged ? at : staged_part_offset(window_offset, writer, peer);
  }
  constexpr uint64_t staged_row_offset(uint64_t window_offset, int writer, int peer) const {
    const int writer_node = writer / static_cast<int>(node_size);
    for (uint32_t i = 0; i < count; ++i) {
      const StagedArray& a = arrays[i];
      const uint64_t row = a.writer_row(writer, writer_node);
      if (window_offset >= row && window_offset - row < a.row_bytes) {
        return staged_row_apart(a, writer, peer) + (window_offset - row);
      }
    }
    return kNotStaged;
  }
  constexpr uint64_t staged_part_offset(uint64_t window_offset, int writer, int peer) const {
    const int writer_node = writer / static_cast<int>(node_size);
    for (uint32_t i = 0; i < part_count; ++i) {
      const StagedParts& p = parts[i];
      const uint64_t row = p.rows.writer_row(writer, writer_node);
      if (window_offset >= row && window_offset - row < p.rows.row_bytes) {
        const uint64_t column = p.staged_column(window_offset - row);
        if (column != kNotStaged) return staged_row(p.rows, writer, peer) + column;
      }
    }
    return kNotStaged;
  }
};

}  // namespace epc::kernels
