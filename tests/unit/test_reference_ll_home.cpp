// SPDX-License-Identifier: Apache-2.0
// Low-Latency reference model, combine-time weights (EPC_WEIGHTING_HOME, ll_combine_home):
// the hand-worked routing of reference_hand_case.hpp with home weights, a case whose
// top-k order rounds differently from any order by rank, and validation.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "tests/reference/reference.hpp"
#include "tests/unit/reference_hand_case.hpp"

namespace epc::ref {
namespace {

using hand_case::exact_bf16;
using hand_case::hand_problem;

// Expert outputs for hand_problem: row i of expert block (q, l) holds base + c in channel c,
// the bases listed per entry below; padding rows hold NaN so that reading one would show.
//   expert 0 (q0 l0): (r0 t2 k0) 10, (r1 t0 k1) 20
//   expert 1 (q0 l1): (r0 t0 k0) 30, (r0 t2 k1) 40, (r1 t1 k0) 50, (r1 t1 k1) 60
//   expert 2 (q1 l0): (r0 t0 k1) 70, (r1 t0 k0) 80
//   expert 3 (q1 l1): (r0 t1 k0) 90
std::vector<std::vector<uint16_t>> hand_outputs() {
  const float bases[2][2][4] = {{{10, 20, 0, 0}, {30, 40, 50, 60}}, {{70, 80, 0, 0}, {90, 0, 0, 0}}};
  const int counts[2][2] = {{2, 4}, {2, 1}};
  std::vector<std::vector<uint16_t>> y(2, std::vector<uint16_t>(2 * 6 * 8, 0x7FC0));
  for (int q = 0; q < 2; ++q) {
    for (int l = 0; l < 2; ++l) {
      for (int i = 0; i < counts[q][l]; ++i) {
        for (int c = 0; c < 8; ++c) y[q][(l * 6 + i) * 8 + c] = exact_bf16(bases[q][l][i] + static_cast<float>(c));
      }
    }
  }
  return y;
}

// Home weights differ from dispatch's topk_weights in every entry, and the masked entries'
// weights (100, 7, 7) must play no part. Rank 1's token 1 names expert 1 twice: each row is
// weighted by its own slot's weight (2 and -1), where the sender's weights would give
// 0.5 * (50 + c) + 1.5 * (60 + c).
TEST(LlCombineHome, HandChecked) {
  const Problem p = hand_problem();
  const std::vector<std::vector<float>> home = {{2.0f, 0.5f, -1.0f, 100.0f, 0.5f, 0.25f},
                                                {1.0f, 1.0f, 2.0f, -1.0f, 7.0f, 7.0f}};
  std::vector<std::vector<uint16_t>> want(2, std::vector<uint16_t>(3 * 8));
  std::vector<std::vector<float>> want_sums(2, std::vector<float>(3 * 8));
  for (int c = 0; c < 8; ++c) {
    const float cf = static_cast<float>(c);
    want_sums[0][0 * 8 + c] = 95.0f + 2.5f * cf;   // 2 * (30 + c) + 0.5 * (70 + c)
    want_sums[0][1 * 8 + c] = -90.0f - cf;         // -1 * (90 + c); slot 1 masked
    want_sums[0][2 * 8 + c] = 15.0f + 0.75f * cf;  // 0.5 * (10 + c) + 0.25 * (40 + c)
    want_sums[1][0 * 8 + c] = 100.0f + 2.0f * cf;  // 1 * (80 + c) + 1 * (20 + c)
    want_sums[1][1 * 8 + c] = 40.0f + cf;          // 2 * (50 + c) - 1 * (60 + c)
    want_sums[1][2 * 8 + c] = 0.0f;                // masked only
    for (int r = 0; r < 2; ++r) {
      for (int t = 0; t < 3; ++t) want[r][t * 8 + c] = exact_bf16(want_sums[r][t * 8 + c]);
    }
  }
  const auto y = hand_outputs();
  EXPECT_EQ(ll_combine_home_sums(p, y, home), want_sums);
  EXPECT_EQ(ll_combine_home(p, y, home), want);
  // Home weights equal to dispatch's: the kTopkOrder combine.
  const std::vector<std::vector<float>> same = {p.ranks[0].topk_weights, p.ranks[1].topk_weights};
  EXPECT_EQ(ll_combine_home(p, y, same), ll_combine(p, y, CombineOrder::kTopkOrder));
}

// One token of rank 0 over two ranks with one expert row each (every channel of expert e's
// row = values[e]), unit weights.
Problem one_token(std::vector<int64_t> idx) {
  Problem p;
  p.nranks = 2;
  p.num_experts = 4;
  p.hidden = 8;
  p.topk = static_cast<int>(idx.size());
  p.max_tokens = 1;
  p.ranks.resize(2);
  p.ranks[0].num_tokens = 1;
  p.ranks[0].topk_weights.assign(idx.size(), 1.0f);
  p.ranks[0].topk_idx = std::move(idx);
  p.ranks[0].x.assign(8, 0x3F80);
  return p;
}

// Entries k0 -> expert 0 (rank 0) y = 2^24, k1 -> expert 2 (rank 1) y = 1, k2 -> expert 1
// (rank 0) y = -2^24, home weights 1. Top-k order: 2^24 + 1 is a float tie that stays at
// 2^24, minus 2^24 gives +0 (0x0000). By rank (rank 0's rows first, as the SENDER partials
// are): 2^24 - 2^24 + 1 = 1 (0x3F80).
TEST(LlCombineHome, SumsInTopkOrderNotByRank) {
  const Problem p = one_token({0, 2, 1});
  std::vector<std::vector<uint16_t>> y(2, std::vector<uint16_t>(2 * 2 * 8, 0));
  for (int c = 0; c < 8; ++c) {
    y[0][(0 * 2) * 8 + c] = 0x4B80;  // expert 0: 2^24
    y[0][(1 * 2) * 8 + c] = 0xCB80;  // expert 1: -2^24
    y[1][(0 * 2) * 8 + c] = 0x3F80;  // expert 2: 1
  }
  const std::vector<std::vector<float>> home = {{1.0f, 1.0f, 1.0f}, {}};
  EXPECT_EQ(ll_combine_home(p, y, home)[0], std::vector<uint16_t>(8, 0x0000));
  EXPECT_EQ(ll_combine(p, y, CombineOrder::kPerRankPrereduce)[0], std::vector<uint16_t>(8, 0x3F80));
  // Weights scale each row alone: 0.5 * 2^24 + 3 * 1 - 0.5 * 2^24 = 3 (2^23 + 3 is exact).
  EXPECT_EQ(ll_combine_home_sums(p, y, {{0.5f, 3.0f, 0.5f}, {}})[0], std::vector<float>(8, 3.0f));
}

TEST(LlCombineHome, RejectsWrongHomeWeights) {
  const Problem p = hand_problem();
  const auto y = hand_outputs();
  const std::vector<float> six(6, 1.0f);
  EXPECT_THROW(ll_combine_home(p, y, {six}), std::invalid_argument);            // one rank
  EXPECT_THROW(ll_combine_home(p, y, {six, {1.0f}}), std::invalid_argument);    // not B * K
  EXPECT_THROW(ll_combine_home(p, {y[0]}, {six, six}), std::invalid_argument);  // y of one rank
  EXPECT_NO_THROW(ll_combine_home(p, y, {six, six}));
}

}  // namespace
}  // namespace epc::ref
