// SPDX-License-Identifier: Apache-2.0
// Which words of a rank's window are signalled across the network, and the GIN signal id
// each one has. Shared by the planner (core/gin_signal_plan.cpp fills it and sizes the GIN
// signal request from it) and the GIN transport (kernels/transport/gin_transport.cuh looks ids up).
//
// Why ids at all: GIN cannot store into a window word and order the store behind earlier
// puts. Only a signal (an add onto a counter NCCL keeps for the receiver, outside our
// window) becomes visible after the payloads of the puts before it on the same context to
// the same peer. So every window word a peer in another node writes (a flag or a counter)
// is carried by its own GIN signal, and its reader reads that signal instead of the word.
//
// A signal array is a [rows][row_words] block of uint64 words whose rows are indexed by the
// writer: its world rank (acknowledgements, layout and low-latency signals) or its node
// (rail flags). Rows written from inside the reader's own node travel over NVLink and get no
// id, so a reader in node n numbers only the other rows, in order:
//   id = first_id + remote_row * row_words + word,   remote_row = row, less
//        rows_per_node when row is past node n's rows
// HT combine's chunk flags are rows indexed by rank of which only the reader's rail peers
// (one per other node) write across the network (kernels/wire/ht_message.hpp): such a "rail"
// array numbers a row by its node, remote_row = the row's node, less 1 past node n.
// The sender computes the same id from the reader's node. Every rank gets the same
// first_id per array, so the ids a rank needs are [0, total_ids).
#pragma once

#include <cstdint>

#include "kernels/wire/limits.hpp"

namespace epc::kernels {

constexpr uint32_t kNoGinSignal = 0xffffffffu;
constexpr int kMaxGinSignalArrays = 10;
static_assert(1 + 2 * kLlMaxSlots <= kMaxGinSignalArrays,
              "a low-latency plan has the barrier inbox and each slot's dispatch and combine signals");
static_assert(1 + 2 * kHtLayoutSlots + 4 <= kMaxGinSignalArrays,
              "a high-throughput plan has the barrier inbox, both layout rounds' signals of each layout "
              "slot, two acknowledgement arrays, combine flags and rail flags");

struct GinSignalArray {
  uint64_t offset;         // window offset of row 0, word 0
  uint32_t rows;           // nodes * rows_per_node
  uint32_t row_words;      // uint64 words per row
  uint32_t rows_per_node;  // the node size when rows are indexed by rank, 1 when by node
  uint32_t first_id;
  uint32_t rail;  // 1: only the reader's rail peers write across nodes (one id row per node)

  constexpr uint64_t bytes() const { return uint64_t{rows} * row_words * sizeof(uint64_t); }
  constexpr uint32_t id_rows() const { return rail != 0 ? rows / rows_per_node - 1 : rows - rows_per_node; }
  // Ids the array needs: its rows outside any one node (one per other node for a rail array).
  constexpr uint64_t ids() const { return uint64_t{id_rows()} * row_words; }
};

// Plain data, passed to kernels by value inside the transport.
struct GinSignalMap {
  GinSignalArray arrays[kMaxGinSignalArrays];
  uint32_t count;
  uint32_t total_ids;

  // The id of the word at `offset` in the window of a rank of node `reader_node`, or
  // kNoGinSignal when no peer of another node writes that word. A few compares per array:
  // signals are rare next to the bytes they publish.
  constexpr uint32_t id(uint64_t offset, int reader_node) const {
    for (uint32_t i = 0; i < count; ++i) {
      const GinSignalArray& a = arrays[i];
      if (offset < a.offset || offset - a.offset >= a.bytes() || (offset - a.offset) % sizeof(uint64_t) != 0) {
        continue;
      }
      const uint64_t word = (offset - a.offset) / sizeof(uint64_t);
      const uint64_t row = word / a.row_words, column = word % a.row_words;
      const uint64_t own_first = static_cast<uint64_t>(reader_node) * a.rows_per_node;
      if (row >= own_first && row < own_first + a.rows_per_node) return kNoGinSignal;
      uint64_t remote_row = row < own_first ? row : row - a.rows_per_node;
      if (a.rail != 0) remote_row /= a.rows_per_node;  // the rank's node, counted without node n
      return a.first_id + static_cast<uint32_t>(remote_row * a.row_words + column);
    }
    return kNoGinSignal;
  }
};

}  // namespace epc::kernels
