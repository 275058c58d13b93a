// SPDX-License-Identifier: Apache-2.0
// The capacity arithmetic the HT layout kernel runs (kernels/wire/ht_capacity.hpp), on the
// CPU: for random count matrices and limits, what each sender derives about its rows at a
// rank (where they start, how many are kept) agrees with what that rank derives about the
// same source, the kept rows are the reference model's, and the compact dispatch slots of
// different sources never overlap and stay below the rank's limit, hence inside a window of
// recv_capacity slots. Across nodes, the forwarders (rail peers, ht_dispatch_forward.cuh)
// put every row they forward where the receiver reads it and where a sender of the
// receiver's own node would have put it (ht_forward_slot). One GPU runs a single rank, so
// this is where the multi-rank slot arithmetic is checked.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "core/planner.hpp"
#include "kernels/wire/ht_capacity.hpp"
#include "tests/unit/group_config.hpp"

namespace {

using epc::kernels::ht_forward_slot;
using epc::kernels::ht_kept_rows;
using epc::kernels::ht_rows_at;
using epc::kernels::ht_window_first_slot;

TEST(HtCapacityMath, KeptRowsByHand) {
  EXPECT_EQ(ht_kept_rows(0, 5, 10), 5);   // all below the limit
  EXPECT_EQ(ht_kept_rows(8, 5, 10), 2);   // rows 8, 9
  EXPECT_EQ(ht_kept_rows(10, 5, 10), 0);  // starts at the limit
  EXPECT_EQ(ht_kept_rows(12, 5, 10), 0);
  EXPECT_EQ(ht_kept_rows(3, 0, 10), 0);
  EXPECT_EQ(ht_kept_rows(0, 7, 7), 7);  // exactly the need
}

TEST(HtCapacityMath, LayoutWordsByHand) {
  // 2 header words, L = 64 entry counts, the limit, then the count for each of 4 ranks.
  EXPECT_EQ(epc::kernels::ht_layout_limit_word(64), 66);
  EXPECT_EQ(epc::kernels::ht_layout_count_word(64, 0), 67);
  EXPECT_EQ(epc::kernels::ht_layout_count_word(64, 3), 70);
  EXPECT_EQ(epc::kernels::ht_layout_words(4, 64), 71);
}

TEST(HtCapacityMath, SendersAndReceiversAgreeAndCompactSlotsAreDisjoint) {
  std::mt19937_64 engine(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int R = 1 + static_cast<int>(engine() % 9);
    const int T = 1 + static_cast<int>(engine() % 50);
    std::vector<int> counts(static_cast<size_t>(R) * R);  // [s][d]
    for (int& n : counts) n = static_cast<int>(engine() % (T + 1));
    auto count = [&](int s, int d) { return counts[static_cast<size_t>(s) * R + d]; };
    for (int d = 0; d < R; ++d) {
      const int limit = static_cast<int>(engine() % (R * T + 1));
      std::vector<bool> slot_used(static_cast<size_t>(limit), false);
      int received = 0;  // d's rows so far in (source, token) order: the reference's numbering
      for (int s = 0; s < R; ++s) {
        int first = -1, total = -1;
        ht_rows_at(count, R, s, d, &first, &total);
        EXPECT_EQ(first, received);  // the receiver's recv_base[s]
        const int kept = ht_kept_rows(first, count(s, d), limit);
        for (int j = 0; j < count(s, d); ++j) {
          const bool keep = received + j < limit;  // the reference model's rule
          EXPECT_EQ(j < kept, keep) << "R " << R << " source " << s << " dest " << d << " row " << j;
          if (j < kept) {
            const int slot = first + j;  // the sender's send_slot[d] + j, the receiver's recv_slot[s] + j
            ASSERT_LT(slot, limit);
            EXPECT_FALSE(slot_used[static_cast<size_t>(slot)]);
            slot_used[static_cast<size_t>(slot)] = true;
          }
        }
        received += count(s, d);
        if (s == R - 1) {
          EXPECT_EQ(total, received);
        }
      }
    }
  }
}

// 4 ranks in 2 nodes of 2, T = 10; count(s, d), the tokens s sends to d:
//   s0: 3 1 4 1    s1: 5 9 2 6    s2: 5 3 5 8    s3: 9 7 9 3
// Forwarder f stands in for its rail peer in the other node (the rank there with f's local
// index) and writes that source's rows where they start at each rank i of f's node.
TEST(HtCapacityMath, ForwardersWriteWhereTheSourceWouldByHand) {
  const int counts[4][4] = {{3, 1, 4, 1}, {5, 9, 2, 6}, {5, 3, 5, 8}, {9, 7, 9, 3}};
  auto count = [&](int s, int d) { return counts[s][d]; };
  const int R = 4, S = 2, T = 10;
  // Compact windows: the rows of sources below the forwarded one.
  // Forwarder 0 (node 0) for rank 2: at rank 0 after s0, s1 (3 + 5), at rank 1 (1 + 9).
  EXPECT_EQ(ht_forward_slot(count, R, S, 0, 1, 0, true, T), 8);
  EXPECT_EQ(ht_forward_slot(count, R, S, 0, 1, 1, true, T), 10);
  // Forwarder 1 for rank 3: at rank 0 after s0..s2 (3 + 5 + 5), at rank 1 (1 + 9 + 3).
  EXPECT_EQ(ht_forward_slot(count, R, S, 1, 1, 0, true, T), 13);
  EXPECT_EQ(ht_forward_slot(count, R, S, 1, 1, 1, true, T), 13);
  // Forwarder 2 (node 1) for rank 0: first everywhere.
  EXPECT_EQ(ht_forward_slot(count, R, S, 2, 0, 0, true, T), 0);
  EXPECT_EQ(ht_forward_slot(count, R, S, 2, 0, 1, true, T), 0);
  // Forwarder 3 for rank 1: at rank 2 after s0 (4), at rank 3 after s0 (1).
  EXPECT_EQ(ht_forward_slot(count, R, S, 3, 0, 0, true, T), 4);
  EXPECT_EQ(ht_forward_slot(count, R, S, 3, 0, 1, true, T), 1);
  // Where rank 2's own sender puts its rows at rank 3 (send_slot): after s0, s1 (1 + 6).
  EXPECT_EQ(ht_window_first_slot(count, R, 2, 3, true, T), 7);
  // At R * T the slots are [source][j]: source * T, whatever the counts.
  EXPECT_EQ(ht_forward_slot(count, R, S, 0, 1, 0, false, T), 20);
  EXPECT_EQ(ht_forward_slot(count, R, S, 1, 1, 1, false, T), 30);
  EXPECT_EQ(ht_forward_slot(count, R, S, 3, 0, 0, false, T), 10);
  // Nodes of one rank (two ranks, the GPU tests' split): each rank forwards the other's rows
  // into its own window, rank 0 after its own 3 rows, rank 1 first.
  EXPECT_EQ(ht_forward_slot(count, 2, 1, 0, 1, 0, true, T), 3);
  EXPECT_EQ(ht_forward_slot(count, 2, 1, 1, 0, 0, true, T), 0);
}

// What lands in every rank's dispatch window, over random count matrices, node splits,
// windows and row limits: senders of the receiver's node write source s's kept row j at
// their send_slot + j, the forwarders of other nodes' sources at their forward_slot + j, as
// the layout kernel computes them (ht_layout_capacity.cuh); the receiver reads row j of s at
// its recv_slot[s] + j. Every kept row must be found there, each slot written once, and
// every slot inside the window (recv_capacity slots); at R * T the slots are s * T + j.
TEST(HtCapacityMath, ForwardersAgreeWithSendersAndReceiversOnEveryRow) {
  std::mt19937_64 engine(23);
  int forwarded = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int S = 1 + static_cast<int>(engine() % 4);  // node size
    const int M = 1 + static_cast<int>(engine() % 4);  // nodes
    const int R = S * M, T = 1 + static_cast<int>(engine() % 40);
    std::vector<int> counts(static_cast<size_t>(R) * R);  // [s][d]
    for (int& n : counts) n = static_cast<int>(engine() % (T + 1));
    auto count = [&](int s, int d) { return counts[static_cast<size_t>(s) * R + d]; };
    // The group's window (recv_capacity; compact below R * T) and each rank's row limit (a
    // handle's capacity, at most the window).
    const int window = trial % 4 == 0 ? R * T : 1 + static_cast<int>(engine() % (R * T));
    const bool compact = window < R * T;
    std::vector<int> limit(static_cast<size_t>(R));
    for (int& l : limit) l = trial % 3 == 0 ? window : static_cast<int>(engine() % (window + 1));
    for (int d = 0; d < R; ++d) {
      std::vector<std::pair<int, int>> slots(static_cast<size_t>(window), {-1, -1});  // (source, row) written
      int received = 0;  // d's rows before source s: the receiver's recv_base[s]
      for (int s = 0; s < R; ++s) {
        const int recv_slot = compact ? received : s * T;  // as the layout writes it on d
        int first = 0, total = 0;
        ht_rows_at(count, R, s, d, &first, &total);  // as source s's layout computes it
        const int kept = ht_kept_rows(first, count(s, d), limit[static_cast<size_t>(d)]);
        int write_slot = 0;
        if (s / S == d / S) {
          write_slot = compact ? first : s * T;  // s's send_slot[d]
        } else {
          // The forwarder: s's rail peer in d's node, forwarding for node s / S to rank d % S.
          const int f = d / S * S + s % S;
          write_slot = ht_forward_slot(count, R, S, f, s / S, d % S, compact, T);
          ++forwarded;
        }
        EXPECT_EQ(write_slot, recv_slot) << "R " << R << " S " << S << " source " << s << " dest " << d;
        EXPECT_EQ(write_slot, ht_window_first_slot(count, R, s, d, compact, T));
        if (!compact) {
          EXPECT_EQ(write_slot, s * T);
        }
        for (int j = 0; j < kept; ++j) {
          const int slot = write_slot + j;
          ASSERT_GE(slot, 0);
          ASSERT_LT(slot, window) << "R " << R << " source " << s << " dest " << d << " row " << j;
          EXPECT_EQ(slots[static_cast<size_t>(slot)].first, -1) << "slot " << slot << " written twice";
          slots[static_cast<size_t>(slot)] = {s, j};
        }
        received += count(s, d);
      }
      // The receiver reads each source's kept rows back from its recv_slot.
      received = 0;
      for (int s = 0; s < R; ++s) {
        const int kept = ht_kept_rows(received, count(s, d), limit[static_cast<size_t>(d)]);
        for (int j = 0; j < kept; ++j) {
          const int slot = (compact ? received : s * T) + j;
          ASSERT_LT(slot, window);
          EXPECT_EQ(slots[static_cast<size_t>(slot)], std::make_pair(s, j)) << "R " << R << " dest " << d;
        }
        received += count(s, d);
      }
    }
  }
  EXPECT_GT(forwarded, 1000);  // the cases cross nodes often
}

TEST(HtCapacityMath, PlannedLayoutSlotHoldsBothRounds) {
  // 8 ranks, 256 experts (32 local): 2 * 8 signals, 8 * (2 + 32 + 1 + 8) words, 8 * 32 words.
  auto c = epc::test::group_config(EPC_MODE_HIGH_THROUGHPUT, 256, 7168, 4096, 8);
  const epc::Plan p = epc::make_plan(c, {8, 8, 1});
  EXPECT_EQ(epc::ht_layout_round2_signals(8), 64u);
  EXPECT_EQ(epc::ht_layout_words_offset(8), 128u);
  EXPECT_EQ(epc::ht_layout_round2_words_offset(8, 32), 128u + 8u * 43u * 4u);
  EXPECT_EQ(epc::ht_layout_slot_bytes(8, 32), 128u + 8u * 43u * 4u + 8u * 32u * 4u);
  EXPECT_GE(p.region(EPC_REGION_LAYOUT, 0).size, epc::ht_layout_slot_bytes(8, 32));
  EXPECT_GE(p.region(EPC_REGION_LAYOUT, 1).size, epc::ht_layout_slot_bytes(8, 32));
}

}  // namespace
