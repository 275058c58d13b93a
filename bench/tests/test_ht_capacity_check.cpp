// SPDX-License-Identifier: Apache-2.0
// The HT receive-capacity expectations the bench checks its outputs against, on routings small
// enough to count by hand.
#include <gtest/gtest.h>

#include "bench/ht_capacity_check.hpp"

namespace epc::bench {
namespace {

// One rank, 4 experts, top-2, 4 tokens: every token lands on the rank once (one row each).
// Token 0: experts 0, 1; token 1: 2, 2 (a duplicate entry counts twice); token 2: 3, -1;
// token 3: both masked (sent nowhere).
const std::vector<Routing> kOneRank = {{0, 1, 2, 2, 3, -1, -1, -1}};

TEST(HtCapacityCheck, AWindowThatHoldsEveryRowDropsNone) {
  for (int64_t capacity : {0, 3, 4}) {
    HtCapacityExpectation e;
    std::string error;
    ASSERT_TRUE(expect_ht_capacity(kOneRank, 0, 4, 2, 4, capacity, e, error)) << error;
    EXPECT_EQ(e.arrived, 3);
    EXPECT_EQ(e.kept, 3);
    EXPECT_EQ(e.expert_counts, (std::vector<int32_t>{1, 1, 2, 1}));
    EXPECT_EQ(e.combined, (std::vector<float>{1.0f, 1.0f, 1.0f, 0.0f}));
    EXPECT_EQ(e.overflow_rank, -1);
    EXPECT_EQ(e.overflow_rows, 0);
  }
}

// Capacity 2: rows 0 and 1 (tokens 0 and 1) are kept, token 2's row is dropped: its entry
// leaves expert 3's count and its combine gets no term.
TEST(HtCapacityCheck, DropKeepsTheLowestTokensFirst) {
  HtCapacityExpectation e;
  std::string error;
  ASSERT_TRUE(expect_ht_capacity(kOneRank, 0, 4, 2, 4, 2, e, error)) << error;
  EXPECT_EQ(e.arrived, 3);
  EXPECT_EQ(e.kept, 2);
  EXPECT_EQ(e.expert_counts, (std::vector<int32_t>{1, 1, 2, 0}));
  EXPECT_EQ(e.combined, (std::vector<float>{1.0f, 1.0f, 0.0f, 0.0f}));
  EXPECT_EQ(e.overflow_rank, 0);
  EXPECT_EQ(e.overflow_rows, 1);
  std::vector<int64_t> dropped;
  ASSERT_TRUE(ht_dropped_rows(kOneRank, 4, 2, 4, 2, dropped, error)) << error;
  EXPECT_EQ(dropped, std::vector<int64_t>{1});
  ASSERT_TRUE(ht_dropped_rows(kOneRank, 4, 2, 4, 0, dropped, error)) << error;
  EXPECT_EQ(dropped, std::vector<int64_t>{0});
}

// Two ranks of 2 experts, top-1, 2 tokens each, capacity 1. Rank 0 sends token 0 to rank 1 and
// token 1 to rank 0; rank 1 sends both its tokens to rank 1. Rank 0 receives one row (0, 1):
// kept. Rank 1 receives (0, 0), (1, 0), (1, 1) in that order and keeps (0, 0) only. Every rank
// reports rank 1's overflow of 2 rows.
TEST(HtCapacityCheck, TwoRanksSeeTheSameOverflow) {
  const std::vector<Routing> all = {{2, 0}, {3, 2}};
  HtCapacityExpectation e0, e1;
  std::string error;
  ASSERT_TRUE(expect_ht_capacity(all, 0, 2, 1, 4, 1, e0, error)) << error;
  ASSERT_TRUE(expect_ht_capacity(all, 1, 2, 1, 4, 1, e1, error)) << error;
  EXPECT_EQ(e0.arrived, 1);
  EXPECT_EQ(e0.kept, 1);
  EXPECT_EQ(e0.expert_counts, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(e0.combined, (std::vector<float>{1.0f, 1.0f}));  // both of rank 0's tokens were kept
  EXPECT_EQ(e1.arrived, 3);
  EXPECT_EQ(e1.kept, 1);
  EXPECT_EQ(e1.expert_counts, (std::vector<int32_t>{1, 0}));  // expert 2 (local 0) from (0, 0)
  EXPECT_EQ(e1.combined, (std::vector<float>{0.0f, 0.0f}));   // rank 1's tokens were dropped
  for (const HtCapacityExpectation* e : {&e0, &e1}) {
    EXPECT_EQ(e->overflow_rank, 1);
    EXPECT_EQ(e->overflow_rows, 2);
  }
  std::vector<int64_t> dropped;
  ASSERT_TRUE(ht_dropped_rows(all, 2, 1, 4, 1, dropped, error)) << error;
  EXPECT_EQ(dropped, (std::vector<int64_t>{0, 2}));
}

TEST(HtCapacityCheck, TheModelsRefusalIsAnError) {
  HtCapacityExpectation e;
  std::string error;
  EXPECT_FALSE(expect_ht_capacity({{9, 0}}, 0, 1, 2, 4, 1, e, error));  // expert 9 of 4
  EXPECT_NE(error.find("reference model refused"), std::string::npos) << error;
  std::vector<int64_t> dropped;
  EXPECT_FALSE(ht_dropped_rows({{9, 0}}, 1, 2, 4, 1, dropped, error));
}

}  // namespace
}  // namespace epc::bench
