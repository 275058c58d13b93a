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
// array, and stages just that row, once per destination:
//
//   net_staging = [remote_ranks] rank blocks, then [remote_nodes] rail blocks
//   rank block   one per rank outside the writer's node, in world-rank order: the writer's
//                row of every array it writes to every rank (StagedFor::kEveryRemoteRank)
//   rail block   one per other node, in node order: the writer's row of every array it
//                writes only to its rail peer there, the rank with its own local index
//                (StagedFor::kRemoteRailPeer; high-throughput rail slots and partials)
//
// Inside a block every array has its row at the same place (StagedArray::staged), each row
// starting 16-byte aligned; so the byte `column` of the writer's row of array a, bound for
// peer p, is staged at
//   offset + block(p) + a.staged + column
// Writes of 16-byte vectors stay 16-byte aligned on both ends when the window row is, and
// the last value signalled into a word (peer_transport.cuh) has a staged word of its own.
// Named getters below compute every such offset; neither side does its own arithmetic.
#pragma once

#include <cstdint>

#include "kernels/wire/limits.hpp"

namespace epc::kernels {

// What a staged array is, for named lookups (StagingMap::array) and diagnostics.
enum class Staged : uint32_t {
  kBarrierInbox = 0,       // control region: [nranks] uint64 epochs
  kLlMessages = 1,         // dispatch_recv[slot]: [nranks][max_tokens] messages
  kLlCounts = 2,           // dispatch_recv[slot]: [nranks][local_experts] int32 behind them
  kLlDispatchSignals = 3,  // dispatch_signal[slot]: [nranks][kLlSignalRowWords] uint64
  kLlCombineRows = 4,      // combine_recv[slot]: [nranks][max_tokens] bf16 rows
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
};

enum class StagedFor : uint32_t { kEveryRemoteRank = 0, kRemoteRailPeer = 1 };
enum class RowOf : uint32_t { kRank = 0, kNode = 1 };

constexpr uint32_t kNoStagingSlot = 0xffffffffu;
constexpr uint64_t kNotStaged = ~uint64_t{0};
constexpr uint64_t kStagedRowAlignment = 16;
// A low-latency plan stages the barrier inbox and five arrays per slot; a high-throughput
// plan fifteen.
constexpr int kMaxStagedArrays = 16;
static_assert(1 + 5 * kLlMaxSlots <= kMaxStagedArrays, "every low-latency plan's arrays fit the staging map");

constexpr uint64_t staged_align(uint64_t bytes) {
  return (bytes + kStagedRowAlignment - 1) / kStagedRowAlignment * kStagedRowAlignment;
}

struct StagedArray {
  uint64_t offset;      // window offset of row 0
  uint64_t row_stride;  // bytes from one row to the next
  uint64_t row_bytes;   // bytes of a row its writer fills, all of which are staged
  uint64_t staged;      // where the writer's row starts inside each block
  Staged name;
  uint32_t slot;  // the plan slot of the array's region, kNoStagingSlot when unslotted
  RowOf row_of;
  StagedFor staged_for;

  // Window offset of the row that rank `writer` (of node `writer_node`) writes.
  constexpr uint64_t writer_row(int writer, int writer_node) const {
    return offset + static_cast<uint64_t>(row_of == RowOf::kNode ? writer_node : writer) * row_stride;
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

  // Bytes the region holds (before the plan rounds it to kRegionAlignment).
  constexpr uint64_t bytes() const {
    return uint64_t{remote_ranks} * rank_block_bytes + uint64_t{remote_nodes} * rail_block_bytes;
  }
  // Window offset of the block for the `remote`-th rank outside the writer's node (world
  // order, the node skipped), or for the rail peer of the `remote_node`-th other node.
  constexpr uint64_t rank_block(uint32_t remote) const { return offset + uint64_t{remote} * rank_block_bytes; }
  constexpr uint64_t rail_block(uint32_t remote_node) const {
    return offset + uint64_t{remote_ranks} * rank_block_bytes + uint64_t{remote_node} * rail_block_bytes;
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
  // Window offset where `writer` stages the start of its row of `a` bound for `peer`.
  constexpr uint64_t staged_row(const StagedArray& a, int writer, int peer) const {
    const uint64_t block = a.staged_for == StagedFor::kRemoteRailPeer ? rail_block(remote_node_index(writer, peer))
                                                                      : rank_block(remote_rank_index(writer, peer));
    return block + a.staged;
  }

  // The array of `name` in plan slot `slot`; nullptr when the plan stages none.
  constexpr const StagedArray* array(Staged name, uint32_t slot = kNoStagingSlot) const {
    for (uint32_t i = 0; i < count; ++i) {
      if (arrays[i].name == name && arrays[i].slot == slot) return &arrays[i];
    }
    return nullptr;
  }

  // Window offset where `writer` stages its byte at `window_offset` of `peer`'s window (a
  // rank outside the writer's node), or kNotStaged when that byte is in no row the writer
  // owns: a planner bug, which the staging map's unit tests rule out for every kernel
  // write. One compare per array: rows are staged whole, a put never spans two.
  constexpr uint64_t staged_offset(uint64_t window_offset, int writer, int peer) const {
    const int writer_node = writer / static_cast<int>(node_size);
    for (uint32_t i = 0; i < count; ++i) {
      const StagedArray& a = arrays[i];
      const uint64_t row = a.writer_row(writer, writer_node);
      if (window_offset >= row && window_offset - row < a.row_bytes) {
        return staged_row(a, writer, peer) + (window_offset - row);
      }
    }
    return kNotStaged;
  }
};

}  // namespace epc::kernels
