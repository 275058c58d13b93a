// SPDX-License-Identifier: Apache-2.0
// The LL token layouts of the reference model (RANK_MAJOR, FLAT): the hand-worked routing
// checked row by row, the combine's rank order, and agreement with HT FLAT on random
// problems (LL FLAT is HT FLAT without a capacity).
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "tests/reference/problem_gen.hpp"
#include "tests/reference/reference.hpp"
#include "tests/reference/reference_ll_tokens.hpp"
#include "tests/unit/reference_hand_case.hpp"

namespace epc::ref {
namespace {

// Options that name only the layout (16-bit rows, no scales).
LlTokenOptions layout_options(LlTokenLayout layout) {
  LlTokenOptions options;
  options.layout = layout;
  return options;
}

using hand_case::exact_bf16;
using hand_case::hand_problem;
using hand_case::one_token_problem;
using hand_case::payload;

std::vector<uint16_t> token_payload(int rank, int token) {
  std::vector<uint16_t> row;
  for (int c = 0; c < 8; ++c) row.push_back(payload(rank, token, c));
  return row;
}

std::vector<uint16_t> row_of(const LlTokenResult& result, int row) {
  return {result.x.begin() + row * 8, result.x.begin() + (row + 1) * 8};
}

// Rank 0 hosts experts 0, 1; rank 1 experts 2, 3 (reference_hand_case.hpp). Tokens reaching
// rank 0, in (rank, token) order: (0,0) [1,-1]; (0,2) [0,1]; (1,0) [-1,0]; (1,1) [1,1];
// rank 1: (0,0) [-1,0]; (0,1) [1,-1]; (1,0) [0,-1].
TEST(LlTokenDispatch, FlatHandCheckedRouting) {
  const auto results = ll_dispatch_tokens(hand_problem(), layout_options(LlTokenLayout::kFlat));
  ASSERT_EQ(results.size(), 2u);
  const LlTokenResult& r0 = results[0];
  EXPECT_EQ(r0.rows, 6);
  EXPECT_EQ(r0.num_recv, 4);
  EXPECT_EQ(r0.written, (std::vector<uint8_t>{1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(r0.rank_counts, (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(r0.expert_counts, (std::vector<int32_t>{2, 4}));  // (1,1)'s duplicate counts twice
  EXPECT_EQ(r0.recv_topk_idx, (std::vector<int32_t>{1, -1, 0, 1, -1, 0, 1, 1, -1, -1, -1, -1}));
  EXPECT_EQ(r0.recv_topk_weights,
            (std::vector<float>{0.5f, 0.0f, 1.0f, 2.0f, 0.0f, 1.0f, 0.5f, 1.5f, 0.0f, 0.0f, 0.0f, 0.0f}));
  const std::pair<int, int> r0_src[] = {{0, 0}, {0, 2}, {1, 0}, {1, 1}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r0.src[i].src_rank, r0_src[i].first);
    EXPECT_EQ(r0.src[i].src_token, r0_src[i].second);
    EXPECT_EQ(row_of(r0, i), token_payload(r0_src[i].first, r0_src[i].second)) << "row " << i;
  }
  EXPECT_EQ(row_of(r0, 4), std::vector<uint16_t>(8, 0));

  const LlTokenResult& r1 = results[1];
  EXPECT_EQ(r1.num_recv, 3);
  EXPECT_EQ(r1.written, (std::vector<uint8_t>{1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(r1.rank_counts, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(r1.expert_counts, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(r1.recv_topk_idx, (std::vector<int32_t>{-1, 0, 1, -1, 0, -1, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(r1.recv_topk_weights,
            (std::vector<float>{0.0f, 0.25f, 0.5f, 0.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(row_of(r1, 1), token_payload(0, 1));
  EXPECT_EQ(row_of(r1, 2), token_payload(1, 0));
}

// The same tokens, zone r holding rank r's tokens from its row 0 (T = 3 rows per zone).
TEST(LlTokenDispatch, RankMajorHandCheckedRouting) {
  const auto results = ll_dispatch_tokens(hand_problem(), layout_options(LlTokenLayout::kRankMajor));
  const LlTokenResult& r0 = results[0];
  EXPECT_EQ(r0.written, (std::vector<uint8_t>{1, 1, 0, 1, 1, 0}));
  EXPECT_EQ(r0.rank_counts, (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(r0.num_recv, 4);
  EXPECT_EQ(r0.recv_topk_idx, (std::vector<int32_t>{1, -1, 0, 1, -1, -1, -1, 0, 1, 1, -1, -1}));
  EXPECT_EQ(row_of(r0, 1), token_payload(0, 2));
  EXPECT_EQ(row_of(r0, 3), token_payload(1, 0));
  EXPECT_EQ(row_of(r0, 4), token_payload(1, 1));
  EXPECT_EQ(r0.src[4].src_rank, 1);
  EXPECT_EQ(r0.src[4].src_token, 1);

  const LlTokenResult& r1 = results[1];
  EXPECT_EQ(r1.written, (std::vector<uint8_t>{1, 1, 0, 1, 0, 0}));
  EXPECT_EQ(r1.rank_counts, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(r1.recv_topk_weights,
            (std::vector<float>{0.0f, 0.25f, 0.5f, 0.0f, 0.0f, 0.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(row_of(r1, 3), token_payload(1, 0));
}

TEST(LlTokenDispatch, GlobalExpertIdsAddTheRanksFirstExpert) {
  LlTokenOptions o;
  o.layout = LlTokenLayout::kFlat;
  o.global_expert_ids = true;
  const auto results = ll_dispatch_tokens(hand_problem(), o);
  EXPECT_EQ(results[1].recv_topk_idx, (std::vector<int32_t>{-1, 2, 3, -1, 2, -1, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(results[0].recv_topk_idx[0], 1);  // rank 0's first expert is 0
}

// Combine input: rank q's flat row i holds flat_values[q][i] in every channel; rows that
// received nothing hold 1000, which no output may contain.
std::vector<std::vector<uint16_t>> combine_input(const Problem& p, LlTokenLayout layout,
                                                 const std::vector<std::vector<float>>& flat_values) {
  const auto flat = ll_token_rows(p, LlTokenLayout::kFlat);
  const auto rows = ll_token_rows(p, layout);
  std::vector<std::vector<uint16_t>> x(
      p.nranks, std::vector<uint16_t>(static_cast<std::size_t>(p.nranks) * p.max_tokens * 8, exact_bf16(1000.0f)));
  for (int r = 0; r < p.nranks; ++r) {
    for (int t = 0; t < p.ranks[r].num_tokens; ++t) {
      for (int d = 0; d < p.nranks; ++d) {
        const int32_t f = flat[r][t * p.nranks + d];
        if (f < 0) continue;
        const int32_t row = rows[r][t * p.nranks + d];
        for (int c = 0; c < 8; ++c) x[d][row * 8 + c] = exact_bf16(flat_values[d][f]);
      }
    }
  }
  return x;
}

// Source 0: t0 = 1 + 0.5 (ranks 0, 1), t1 = 16 (rank 1), t2 = 2 (rank 0);
// source 1: t0 = 4 + -1, t1 = 8, t2 = nothing received anywhere: +0.
TEST(LlTokenCombine, HandChecked) {
  const Problem p = hand_problem();
  for (LlTokenLayout layout : {LlTokenLayout::kFlat, LlTokenLayout::kRankMajor}) {
    const auto x = combine_input(p, layout, {{1.0f, 2.0f, 4.0f, 8.0f}, {0.5f, 16.0f, -1.0f}});
    const auto out = ll_combine_tokens(p, x, layout);
    const float expected[2][3] = {{1.5f, 16.0f, 2.0f}, {3.0f, 8.0f, 0.0f}};
    for (int r = 0; r < 2; ++r) {
      for (int t = 0; t < 3; ++t) {
        EXPECT_EQ(out[r][t * 8], exact_bf16(expected[r][t])) << "rank " << r << " token " << t;
        EXPECT_EQ(out[r][t * 8 + 7], out[r][t * 8]);
      }
    }
    EXPECT_EQ(out[1][2 * 8], 0x0000);  // +0.0
  }
}

// One token of rank 0 sent to ranks 0, 1, 2 (one expert each) with rows 1, 2^-24, 2^-24:
// ascending rank order gives (1 + 2^-24) + 2^-24 = 1 in fp32 (each tie rounds to even),
// where adding the two small terms first would give 1 + 2^-23.
TEST(LlTokenCombine, SumsInAscendingRankOrderInFp32) {
  const Problem p = one_token_problem(3, 3, 0, {2, 0, 1}, {1.0f, 1.0f, 1.0f});
  const float tiny = std::ldexp(1.0f, -24);
  const auto x = combine_input(p, LlTokenLayout::kFlat, {{1.0f}, {tiny}, {tiny}});
  const auto sums = ll_combine_tokens_sums(p, x, LlTokenLayout::kFlat);
  EXPECT_EQ(sums[0][0], 1.0f);
  EXPECT_NE((tiny + tiny) + 1.0f, 1.0f);  // the other order differs
}

// LL FLAT is HT FLAT's layout and combine without a capacity.
TEST(LlTokenDispatch, FlatAgreesWithHtFlatOnRandomProblems) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ProblemGenOptions o;
    o.nranks = 1 + static_cast<int>(seed % 4);
    o.num_experts = 4 * o.nranks;
    o.hidden = 16;
    o.topk = 3;
    o.max_tokens = 5;
    o.seed = seed;
    o.random_token_counts = true;
    o.masked_fraction = 0.2;
    o.allow_duplicate_experts = seed % 2 == 0;
    const Problem p = make_random_problem(o);
    const auto ll = ll_dispatch_tokens(p, layout_options(LlTokenLayout::kFlat));
    const auto ht = ht_dispatch(p);
    const auto rank_major = ll_dispatch_tokens(p, layout_options(LlTokenLayout::kRankMajor));
    std::vector<std::vector<uint16_t>> x_flat(p.nranks), x_rank_major(p.nranks);
    for (int q = 0; q < p.nranks; ++q) {
      const std::size_t n = static_cast<std::size_t>(ht[q].num_recv);
      ASSERT_EQ(ll[q].num_recv, ht[q].num_recv);
      EXPECT_EQ(std::vector<uint16_t>(ll[q].x.begin(), ll[q].x.begin() + n * 16), ht[q].x);
      EXPECT_EQ(std::vector<int32_t>(ll[q].recv_topk_idx.begin(), ll[q].recv_topk_idx.begin() + n * 3),
                ht[q].recv_topk_idx);
      EXPECT_EQ(ll[q].expert_counts, ht[q].expert_counts);
      EXPECT_EQ(ll[q].rank_counts, ht[q].tokens_from_rank);
      EXPECT_EQ(rank_major[q].expert_counts, ht[q].expert_counts);
      EXPECT_EQ(rank_major[q].rank_counts, ht[q].tokens_from_rank);
      // The expert "computes" its input: combine returns the dispatched rows.
      x_flat[q] = ll[q].x;
      x_rank_major[q] = rank_major[q].x;
    }
    const auto ht_out = ht_combine(p, [&] {
      std::vector<std::vector<uint16_t>> rows;
      for (const HtDispatchResult& r : ht) rows.push_back(r.x);
      return rows;
    }());
    EXPECT_EQ(ll_combine_tokens(p, x_flat, LlTokenLayout::kFlat), ht_out.x) << "seed " << seed;
    EXPECT_EQ(ll_combine_tokens(p, x_rank_major, LlTokenLayout::kRankMajor), ht_out.x) << "seed " << seed;
  }
}

TEST(LlTokenValidation, RejectsWrongCombineInput) {
  const Problem p = hand_problem();
  std::vector<std::vector<uint16_t>> x(2, std::vector<uint16_t>(2 * 3 * 8 - 1, 0));
  EXPECT_THROW(ll_combine_tokens(p, x, LlTokenLayout::kFlat), std::invalid_argument);
  EXPECT_THROW(ll_combine_tokens(p, {x[0]}, LlTokenLayout::kFlat), std::invalid_argument);
  LlTokenOptions fp8;
  fp8.use_fp8 = true;
  EXPECT_THROW(ll_dispatch_tokens(p, fp8), std::invalid_argument);  // hidden 8 is not a multiple of 128
}

}  // namespace
}  // namespace epc::ref
