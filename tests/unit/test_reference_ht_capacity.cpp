// SPDX-License-Identifier: Apache-2.0
// The reference model's HT receive capacity ("Receive capacity" in reference.hpp): the hand
// routing with capacities that cut it, checked by hand (kept rows, counts, the overflow each
// rank reports, combine without the dropped rows), and over random problems: the rows kept
// are exactly the first min(N, C) rows of the unlimited dispatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/reference/problem_gen.hpp"
#include "tests/reference/reference.hpp"
#include "tests/unit/reference_hand_case.hpp"

namespace epc::ref {
namespace {

using hand_case::exact_bf16;
using hand_case::hand_problem;
using hand_case::payload;

HtDispatchOptions with_capacity(int64_t capacity) {
  HtDispatchOptions o;
  o.capacity = capacity;
  return o;
}

TEST(HtCapacity, HandRoutingCutAtThreeRows) {
  // Rank 0 receives (0,0) [1,-1]; (0,2) [0,1]; (1,0) [-1,0]; (1,1) [1,1]: it keeps the first
  // three and drops (1,1). Rank 1 receives three rows and keeps them all.
  const auto results = ht_dispatch(hand_problem(), with_capacity(3));
  const HtDispatchResult& r0 = results[0];
  EXPECT_EQ(r0.num_recv, 4);
  EXPECT_EQ(r0.rows, 3);
  EXPECT_EQ(r0.dropped, 1);
  EXPECT_EQ(r0.recv_topk_idx, (std::vector<int32_t>{1, -1, 0, 1, -1, 0}));
  EXPECT_EQ(r0.recv_topk_weights, (std::vector<float>{0.5f, 0.0f, 1.0f, 2.0f, 0.0f, 1.0f}));
  EXPECT_EQ(r0.expert_counts, (std::vector<int32_t>{2, 2}));  // (1,1)'s two entries are gone
  EXPECT_EQ(r0.tokens_from_rank, (std::vector<int32_t>{2, 1}));
  ASSERT_EQ(r0.x.size(), 3u * 8u);
  EXPECT_EQ(r0.x[2 * 8 + 5], payload(1, 0, 5));
  EXPECT_EQ(r0.src[2].src_rank, 1);
  EXPECT_EQ(r0.src[2].src_token, 0);
  const HtDispatchResult& r1 = results[1];
  EXPECT_EQ(r1.num_recv, 3);
  EXPECT_EQ(r1.rows, 3);
  EXPECT_EQ(r1.dropped, 0);
  EXPECT_EQ(r1.expert_counts, (std::vector<int32_t>{2, 1}));
  // Both ranks report rank 0's one row: rank 1 did not overflow itself.
  const HtLayout layout = ht_layout(hand_problem(), 3);
  EXPECT_EQ(ht_overflow_seen_by(layout, 0).rank, 0);
  EXPECT_EQ(ht_overflow_seen_by(layout, 0).rows, 1);
  EXPECT_EQ(ht_overflow_seen_by(layout, 1).rank, 0);
  EXPECT_EQ(ht_overflow_seen_by(layout, 1).rows, 1);
  EXPECT_EQ(layout.token_row[1], (std::vector<int32_t>{2, 2, -1, -1, -1, -1}));
}

TEST(HtCapacity, HandRoutingCutAtTwoRowsEachRankReportsItself) {
  const HtLayout layout = ht_layout(hand_problem(), 2);
  EXPECT_EQ(layout.num_recv, (std::vector<int32_t>{4, 3}));
  EXPECT_EQ(layout.rows, (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(layout.token_row[0], (std::vector<int32_t>{0, 0, -1, 1, 1, -1}));
  EXPECT_EQ(layout.token_row[1], (std::vector<int32_t>(6, -1)));  // rank 1's tokens come last everywhere
  EXPECT_EQ(ht_overflow_seen_by(layout, 0).rank, 0);
  EXPECT_EQ(ht_overflow_seen_by(layout, 0).rows, 2);
  EXPECT_EQ(ht_overflow_seen_by(layout, 1).rank, 1);
  EXPECT_EQ(ht_overflow_seen_by(layout, 1).rows, 1);
  const auto results = ht_dispatch(hand_problem(), with_capacity(2));
  EXPECT_EQ(results[0].expert_counts, (std::vector<int32_t>{1, 2}));  // (0,0) [1,-1], (0,2) [0,1]
  EXPECT_EQ(results[1].expert_counts, (std::vector<int32_t>{1, 1}));  // (0,0) [-1,0], (0,1) [1,-1]
  EXPECT_EQ(results[1].tokens_from_rank, (std::vector<int32_t>{2, 0}));
}

TEST(HtCapacity, ExactlyTheNeedOverflowsNowhere) {
  const HtLayout layout = ht_layout(hand_problem(), 4);
  EXPECT_EQ(layout.rows, layout.num_recv);
  EXPECT_EQ(layout.token_row, ht_layout(hand_problem()).token_row);
  for (int q = 0; q < 2; ++q) {
    EXPECT_EQ(ht_overflow_seen_by(layout, q).rank, -1);
    EXPECT_EQ(ht_overflow_seen_by(layout, q).rows, 0);
  }
}

TEST(HtCapacity, CombineLeavesOutDroppedRows) {
  // Rank q's row i holds base[q][i] + c in channel c; three rows on each rank.
  const float bases[2][3] = {{1, 2, 3}, {10, 20, 30}};
  std::vector<std::vector<uint16_t>> x(2);
  for (int q = 0; q < 2; ++q) {
    for (int i = 0; i < 3; ++i) {
      for (int c = 0; c < 8; ++c) x[q].push_back(exact_bf16(bases[q][i] + static_cast<float>(c)));
    }
  }
  const std::vector<std::vector<float>> w_in = {{1, 2, 3, 4, 5, 6}, {11, 12, 13, 14, 15, 16}};
  const HtCombineResult result = ht_combine(hand_problem(), x, w_in, 0, 3);
  std::vector<std::vector<uint16_t>> expected(2, std::vector<uint16_t>(3 * 8));
  for (int c = 0; c < 8; ++c) {
    const float cf = static_cast<float>(c);
    expected[0][0 * 8 + c] = exact_bf16(11.0f + 2.0f * cf);  // rank 0 row 0 + rank 1 row 0
    expected[0][1 * 8 + c] = exact_bf16(20.0f + cf);         // rank 1 row 1
    expected[0][2 * 8 + c] = exact_bf16(2.0f + cf);          // rank 0 row 1
    expected[1][0 * 8 + c] = exact_bf16(33.0f + 2.0f * cf);  // rank 0 row 2 + rank 1 row 2
    expected[1][1 * 8 + c] = 0x0000;                         // its one row was dropped on rank 0
    expected[1][2 * 8 + c] = 0x0000;                         // sent nowhere
  }
  EXPECT_EQ(result.x, expected);
  // Backward weights: (1,1)'s entries lived on its dropped row: 0.
  EXPECT_EQ(result.topk_weights[0], (std::vector<float>{1, 12, 13, 0, 3, 4}));
  EXPECT_EQ(result.topk_weights[1], (std::vector<float>{15, 6, 0, 0, 0, 0}));
}

TEST(HtCapacity, KeptRowsAreThePrefixOfTheUnlimitedDispatch) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ProblemGenOptions o;
    o.nranks = 3;
    o.num_experts = 6;
    o.hidden = 16;
    o.topk = 3;
    o.max_tokens = 9;
    o.seed = seed;
    o.random_token_counts = true;
    o.masked_fraction = 0.2;
    o.hot_expert_share = 0.5;
    const Problem p = make_random_problem(o);
    const auto all = ht_dispatch(p);
    const int L = p.local_experts();
    for (int64_t capacity : {1, 2, 5, 9, 27}) {
      const auto cut = ht_dispatch(p, with_capacity(capacity));
      for (int q = 0; q < p.nranks; ++q) {
        const int rows = static_cast<int>(std::min<int64_t>(all[q].num_recv, capacity));
        ASSERT_EQ(cut[q].rows, rows);
        EXPECT_EQ(cut[q].num_recv, all[q].num_recv);
        EXPECT_EQ(cut[q].dropped, all[q].num_recv - rows);
        const std::size_t H = 16, K = 3;
        EXPECT_TRUE(std::equal(cut[q].x.begin(), cut[q].x.end(), all[q].x.begin()));
        EXPECT_EQ(cut[q].x.size(), rows * H);
        EXPECT_TRUE(std::equal(cut[q].recv_topk_idx.begin(), cut[q].recv_topk_idx.end(), all[q].recv_topk_idx.begin()));
        EXPECT_EQ(cut[q].recv_topk_idx.size(), rows * K);
        std::vector<int32_t> counts(L, 0);
        for (std::size_t i = 0; i < rows * K; ++i) {
          if (cut[q].recv_topk_idx[i] >= 0) ++counts[cut[q].recv_topk_idx[i]];
        }
        EXPECT_EQ(cut[q].expert_counts, counts) << "seed " << seed << " capacity " << capacity;
      }
    }
  }
}

}  // namespace
}  // namespace epc::ref
