// SPDX-License-Identifier: Apache-2.0
// Receive capacity of high-throughput handles (EpcGroupConfig.recv_capacity and overflow,
// EpcHandleConfig.capacity): which rows a step keeps when more arrive than a rank holds,
// shared by the layout kernel, which applies it, and the unit tests.
//
// Every rank numbers the rows it receives in (source rank, source token) order: source s's
// j-th token for rank d is d's row pos_d(s) + j, pos_d(s) being the tokens ranks below s
// send to d. Rank d holds the rows below its limit (its handle's capacity in rows, at most
// its window's recv_capacity tokens); rows past it are not written, so what each source
// keeps at d is a prefix of what it sends there. The layout exchange gives every rank every
// source's count for every rank and every rank's limit, so every rank derives the same
// answer: senders skip the rows that do not fit and receivers expect none of them.
//
// The dispatch window: with recv_capacity below R * T, a rank's dispatch slots are compact,
// row i in slot i (i < recv_capacity); at R * T, the slots are [source][j] (slot s * T + j),
// which needs no positions from other ranks. Across nodes a source's rows for the ranks of
// another node are written there by its rail peer, the forwarder (ht_dispatch_forward.cuh),
// which must put them where the sender of its own node would: from the same counts the
// layout gives it, for each source it forwards and each rank of its node, where that
// source's rows start at that rank (ht_forward_slot, the handle's forward_slot).
#pragma once

#include <cstdint>

#include "kernels/wire/ht_message.hpp"

namespace epc::kernels {

// The words one source writes into every rank's layout slot (round one): tokens it sends
// there, its B, its entries for each of that rank's local experts (kHtLayoutHeaderWords + L
// words in all), then its own row limit and the tokens it sends to every rank.
constexpr int ht_layout_limit_word(int local_experts) { return static_cast<int>(kHtLayoutHeaderWords) + local_experts; }
constexpr int ht_layout_count_word(int local_experts, int dest) {
  return ht_layout_limit_word(local_experts) + 1 + dest;
}
constexpr int ht_layout_words(int nranks, int local_experts) { return ht_layout_count_word(local_experts, nranks); }

// Rows of `rows` rows numbered from `first` that fall below `limit`.
constexpr int ht_kept_rows(int64_t first, int rows, int64_t limit) {
  return limit <= first ? 0 : (limit - first >= rows ? rows : static_cast<int>(limit - first));
}

// Where rank `dest`'s rows from sources `below` and up start (the rows sources below it
// send there), and all rows `dest` receives, from count(s, d): the tokens s sends to d.
template <typename Count>
constexpr void ht_rows_at(const Count& count, int nranks, int below, int dest, int* first, int* total) {
  int before = 0, all = 0;
  for (int s = 0; s < nranks; ++s) {
    const int n = count(s, dest);
    if (s < below) before += n;
    all += n;
  }
  *first = before;
  *total = all;
}

// Where the rows of `source` start in the dispatch window of `dest`: pos_dest(source) in a
// compact window, else source * max_tokens. Senders (send_slot), receivers (recv_slot) and
// forwarders (forward_slot) all come to this.
template <typename Count>
constexpr int ht_window_first_slot(const Count& count, int nranks, int source, int dest, bool compact, int max_tokens) {
  if (!compact) return source * max_tokens;
  int first = 0, total = 0;
  ht_rows_at(count, nranks, source, dest, &first, &total);
  return first;
}

// Across nodes of `node_size` ranks: where forwarder `rank` writes, in the window of rank i
// of its node, the rows its rail peer in node m (the rank of node m with its local index)
// sends there. The handle keeps them as forward_slot[m * node_size + i].
template <typename Count>
constexpr int ht_forward_slot(const Count& count, int nranks, int node_size, int rank, int m, int i, bool compact,
                              int max_tokens) {
  const int source = m * node_size + rank % node_size;
  const int dest = rank / node_size * node_size + i;
  return ht_window_first_slot(count, nranks, source, dest, compact, max_tokens);
}

// What a handle's last layout found about capacity, the same on every rank (device memory,
// read by the step kernels and written by the layout).
struct HtOverflowState {
  int32_t skip_steps;  // 1: some rank's receive overflowed under EPC_OVERFLOW_FAIL, so
                       // dispatch and combine do nothing on any rank until the next layout
  int32_t rank;        // the rank reported (ht_overflow_report), -1 for none
  int32_t rows;        // the rows that did not fit there
  int32_t reserved;
};

// The same for the host (mapped pinned memory): `sequence` names the routing whose layout
// wrote it, and is written last.
struct HtOverflowRecord {
  int32_t rank;
  int32_t rows;
  uint64_t sequence;
};

}  // namespace epc::kernels
