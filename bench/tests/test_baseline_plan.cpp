// SPDX-License-Identifier: Apache-2.0
// The baseline's pack order and return positions, worked out by hand.
#include <gtest/gtest.h>

#include <cstring>

#include "bench/baseline_plan.hpp"

namespace epc::bench {
namespace {

// 2 ranks, 4 experts (0, 1 on rank 0; 2, 3 on rank 1), top-2, 3 tokens:
// token 0 -> {2, 0}, token 1 -> {3, 2}, token 2 -> {1, -1}.
const Routing kRouting = {2, 0, 3, 2, 1, -1};

TEST(BaselinePlan, LowLatencySortsSelectionsByExpert) {
  const BaselinePlan p = ll_baseline_plan(kRouting, 3, 2, 4, 2);
  EXPECT_EQ(p.width, 2);
  EXPECT_EQ(p.count_bins, 4);
  EXPECT_EQ(p.counts_per_peer, 2);
  EXPECT_EQ(p.count_input, (std::vector<int32_t>{2, 0, 3, 2, 1, -1}));
  // Experts 0 (token 0), 1 (token 2), 2 (tokens 0, 1), 3 (token 1).
  EXPECT_EQ(p.src_token, (std::vector<int32_t>{0, 2, 0, 1, 1}));
  EXPECT_EQ(p.pos, (std::vector<int32_t>{2, 0, 4, 3, 1, -1}));
  EXPECT_EQ(p.weights, std::vector<float>(6, 0.5f));
  EXPECT_TRUE(p.meta.empty());
}

TEST(BaselinePlan, HighThroughputSendsATokenOncePerRank) {
  const BaselinePlan p = ht_baseline_plan(kRouting, 3, 2, 4, 2);
  EXPECT_EQ(p.width, 2);
  EXPECT_EQ(p.count_bins, 2);
  EXPECT_EQ(p.counts_per_peer, 1);
  // To rank 0: tokens 0 and 2; to rank 1: tokens 0 and 1 (token 1 once, with two entries).
  EXPECT_EQ(p.src_token, (std::vector<int32_t>{0, 2, 0, 1}));
  EXPECT_EQ(p.count_input, (std::vector<int32_t>{0, 0, 1, 1}));
  // pos[t, d]: token 0 at rows 0 (rank 0) and 2 (rank 1), token 1 at row 3, token 2 at row 1.
  EXPECT_EQ(p.pos, (std::vector<int32_t>{0, 2, -1, 3, 1, -1}));
  EXPECT_EQ(p.weights, std::vector<float>(6, 1.0f));
  ASSERT_EQ(p.meta.size(), 3u * 4);
  EXPECT_EQ(p.meta[4 + 0], 3);
  EXPECT_EQ(p.meta[4 + 1], 2);
  EXPECT_EQ(p.meta[8 + 1], -1);
  float w = 0;
  std::memcpy(&w, &p.meta[8 + 2], sizeof w);
  EXPECT_EQ(w, 0.5f);
}

}  // namespace
}  // namespace epc::bench
