// SPDX-License-Identifier: Apache-2.0
// The capacity arithmetic the HT layout kernel runs (kernels/wire/ht_capacity.hpp), on the
// CPU: for random count matrices and limits, what each sender derives about its rows at a
// rank (where they start, how many are kept) agrees with what that rank derives about the
// same source, the kept rows are the reference model's, and the compact dispatch slots of
// different sources never overlap and stay below the rank's limit, hence inside a window of
// recv_capacity slots. One GPU runs a single rank, so this is where the multi-rank slot
// arithmetic is checked.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/planner.hpp"
#include "kernels/wire/ht_capacity.hpp"
#include "tests/unit/group_config.hpp"

namespace {

using epc::kernels::ht_kept_rows;
using epc::kernels::ht_rows_at;

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
