// SPDX-License-Identifier: Apache-2.0
// High-Throughput reference model: a small routing checked by hand (dispatch, combine and
// backward weights), fp32 accumulation order, the fp8 pass-through, properties over random
// problems, and validation.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "tests/reference/problem_gen.hpp"
#include "tests/reference/reference.hpp"
#include "tests/unit/reference_hand_case.hpp"

namespace epc::ref {
namespace {

using hand_case::exact_bf16;
using hand_case::hand_problem;
using hand_case::payload;

// R ranks with one expert each (H = 8); rank 0 holds one token with entries `topk_idx`, the
// other ranks none: the token's rows come back from every rank it names.
Problem one_token_of_rank0(int nranks, std::vector<int64_t> topk_idx) {
  std::vector<float> weights(topk_idx.size(), 1.0f);
  return hand_case::one_token_problem(nranks, nranks, 0, std::move(topk_idx), std::move(weights));
}

// Combine input: rank d's single row holds values[d] in all 8 channels.
std::vector<std::vector<uint16_t>> rows_of(const std::vector<uint16_t>& values) {
  std::vector<std::vector<uint16_t>> rows;
  for (uint16_t v : values) rows.emplace_back(8, v);
  return rows;
}

TEST(HtDispatch, HandCheckedRouting) {
  const auto results = ht_dispatch(hand_problem());
  ASSERT_EQ(results.size(), 2u);

  // Rank 0 hosts experts 0 and 1. Tokens reaching it, in (rank, token) order:
  //   (0,0) [1,-1]; (0,2) [0,1]; (1,0) [-1,0]; (1,1) [1,1].
  const HtDispatchResult& r0 = results[0];
  EXPECT_EQ(r0.num_recv, 4);
  EXPECT_EQ(r0.recv_topk_idx, (std::vector<int32_t>{1, -1, 0, 1, -1, 0, 1, 1}));
  EXPECT_EQ(r0.recv_topk_weights, (std::vector<float>{0.5f, 0.0f, 1.0f, 2.0f, 0.0f, 1.0f, 0.5f, 1.5f}));
  EXPECT_EQ(r0.expert_counts, (std::vector<int32_t>{2, 4}));  // duplicate of (1,1) counts twice
  EXPECT_EQ(r0.tokens_from_rank, (std::vector<int32_t>{2, 2}));
  const std::pair<int, int> r0_src[] = {{0, 0}, {0, 2}, {1, 0}, {1, 1}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r0.src[i].src_rank, r0_src[i].first);
    EXPECT_EQ(r0.src[i].src_token, r0_src[i].second);
    for (int c = 0; c < 8; ++c) {
      EXPECT_EQ(r0.x[i * 8 + c], payload(r0_src[i].first, r0_src[i].second, c));
    }
  }

  // Rank 1 hosts experts 2 and 3 (local 0 and 1): (0,0) [-1,0]; (0,1) [1,-1]; (1,0) [0,-1].
  const HtDispatchResult& r1 = results[1];
  EXPECT_EQ(r1.num_recv, 3);
  EXPECT_EQ(r1.recv_topk_idx, (std::vector<int32_t>{-1, 0, 1, -1, 0, -1}));
  EXPECT_EQ(r1.recv_topk_weights, (std::vector<float>{0.0f, 0.25f, 0.5f, 0.0f, 0.5f, 0.0f}));
  EXPECT_EQ(r1.expert_counts, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(r1.tokens_from_rank, (std::vector<int32_t>{2, 1}));
  const std::pair<int, int> r1_src[] = {{0, 0}, {0, 1}, {1, 0}};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r1.src[i].src_rank, r1_src[i].first);
    EXPECT_EQ(r1.src[i].src_token, r1_src[i].second);
    for (int c = 0; c < 8; ++c) {
      EXPECT_EQ(r1.x[i * 8 + c], payload(r1_src[i].first, r1_src[i].second, c));
    }
  }
  EXPECT_TRUE(r0.x_fp8.empty());
}

TEST(HtDispatch, LayoutMatchesHandRouting) {
  const HtLayout layout = ht_layout(hand_problem());
  EXPECT_EQ(layout.num_recv, (std::vector<int32_t>{4, 3}));
  // token_row[r][t * R + d]
  EXPECT_EQ(layout.token_row[0], (std::vector<int32_t>{0, 0, -1, 1, 1, -1}));
  EXPECT_EQ(layout.token_row[1], (std::vector<int32_t>{2, 2, 3, -1, -1, -1}));
}

// Combine input for hand_problem: row i of rank q holds base[q][i] + c in channel c.
std::vector<std::vector<uint16_t>> hand_rows() {
  const float bases[2][4] = {{1, 2, 3, 4}, {10, 20, 30, 0}};
  const int rows[2] = {4, 3};
  std::vector<std::vector<uint16_t>> x(2);
  for (int q = 0; q < 2; ++q) {
    for (int i = 0; i < rows[q]; ++i) {
      for (int c = 0; c < 8; ++c) x[q].push_back(exact_bf16(bases[q][i] + static_cast<float>(c)));
    }
  }
  return x;
}

TEST(HtCombine, HandChecked) {
  const HtCombineResult result = ht_combine(hand_problem(), hand_rows());
  EXPECT_TRUE(result.topk_weights.empty());
  std::vector<std::vector<uint16_t>> expected(2, std::vector<uint16_t>(3 * 8));
  for (int c = 0; c < 8; ++c) {
    const float cf = static_cast<float>(c);
    expected[0][0 * 8 + c] = exact_bf16(11.0f + 2.0f * cf);  // rank 0 row 0 + rank 1 row 0
    expected[0][1 * 8 + c] = exact_bf16(20.0f + cf);         // rank 1 row 1 only
    expected[0][2 * 8 + c] = exact_bf16(2.0f + cf);          // rank 0 row 1 only
    expected[1][0 * 8 + c] = exact_bf16(33.0f + 2.0f * cf);  // rank 0 row 2 + rank 1 row 2
    expected[1][1 * 8 + c] = exact_bf16(4.0f + cf);          // rank 0 row 3 only
    expected[1][2 * 8 + c] = 0x0000;                         // sent nowhere
  }
  EXPECT_EQ(result.x, expected);
}

TEST(HtCombine, HandCheckedBackwardWeights) {
  // w_in[q][row][k]: rank 0 rows {1,2},{3,4},{5,6},{7,8}; rank 1 rows {11,12},{13,14},{15,16}.
  const std::vector<std::vector<float>> w_in = {{1, 2, 3, 4, 5, 6, 7, 8}, {11, 12, 13, 14, 15, 16}};
  const HtCombineResult result = ht_combine(hand_problem(), hand_rows(), w_in);
  ASSERT_EQ(result.topk_weights.size(), 2u);
  // rank 0: t0 [1,2]: k0 on rank 0 row 0 -> 1, k1 on rank 1 row 0 -> 12;
  //         t1 [3,-1]: k0 on rank 1 row 1 -> 13, k1 masked -> 0;
  //         t2 [0,1]: both on rank 0 row 1 -> 3, 4.
  EXPECT_EQ(result.topk_weights[0], (std::vector<float>{1, 12, 13, 0, 3, 4}));
  // rank 1: t0 [2,0]: k0 on rank 1 row 2 -> 15, k1 on rank 0 row 2 -> 6;
  //         t1 [1,1]: rank 0 row 3 -> 7, 8; t2 masked -> 0, 0.
  EXPECT_EQ(result.topk_weights[1], (std::vector<float>{15, 6, 7, 8, 0, 0}));
}

TEST(HtCombine, AccumulatesInFloatInRankOrder) {
  // R=3, one expert per rank, rank 0's single token goes everywhere.
  // Rows: rank 0 = 1.0, rank 1 = 2^-8, rank 2 = 2^-8: the float sum 1 + 2^-7 is exact ->
  // 0x3F81. (Rounding each pairwise sum to bf16 would stop at the tie 1 + 2^-8 -> 1.0.)
  const Problem p = one_token_of_rank0(3, {0, 1, 2});
  const HtCombineResult result = ht_combine(p, rows_of({0x3F80, 0x3B80, 0x3B80}));
  EXPECT_EQ(result.x[0], std::vector<uint16_t>(8, 0x3F81));
  // Two ties: 1 + 2^-8 alone rounds to even (1.0); -0 + -0 from +0.0f start gives +0.
  EXPECT_EQ(ht_combine(p, rows_of({0x3F80, 0x3B80, 0x8000})).x[0], std::vector<uint16_t>(8, 0x3F80));
  EXPECT_EQ(ht_combine(p, rows_of({0x8000, 0x8000, 0x8000})).x[0], std::vector<uint16_t>(8, 0x0000));
}

TEST(HtCombine, DestinationRankOrderIsTheSummationOrder) {
  // R=4, one expert per rank, the token goes to all four. Rows in rank order
  // 1, 2^-8, 2^-24, 2^-24: the 2^-24 additions are float ties that stay at 1 + 2^-8, a bf16
  // tie -> 0x3F80. Reversed (2^-24, 2^-24, 2^-8, 1): exactly 1 + 2^-8 + 2^-23 -> 0x3F81.
  const Problem p = one_token_of_rank0(4, {3, 1, 0, 2});  // slot order must not matter, only rank order
  EXPECT_EQ(ht_combine(p, rows_of({0x3F80, 0x3B80, 0x3380, 0x3380})).x[0], std::vector<uint16_t>(8, 0x3F80));
  EXPECT_EQ(ht_combine(p, rows_of({0x3380, 0x3380, 0x3B80, 0x3F80})).x[0], std::vector<uint16_t>(8, 0x3F81));
}

TEST(HtCombine, AcrossNodesEachOtherNodeAddsOneBf16Partial) {
  // R=4, one expert per rank, rank 0's token goes to all four. Rows in rank order
  // 1, 2^-9, 2^-9, 2^-17.
  // One node (or nodes of 1): 1 + 2^-9 + 2^-9 + 2^-17 = 1 + 2^-8 + 2^-17 in float, above
  //   the bf16 tie 1 + 2^-8 -> 0x3F81.
  // Nodes of 2: own node 1 + 2^-9; node 1's partial 2^-9 + 2^-17 = 2^-9 (1 + 2^-8) is a
  //   bf16 tie -> 2^-9; 1 + 2^-9 + 2^-9 = 1 + 2^-8, the tie itself -> even -> 0x3F80.
  const Problem p = one_token_of_rank0(4, {0, 1, 2, 3});
  const std::vector<std::vector<uint16_t>> rows = rows_of({0x3F80, 0x3B00, 0x3B00, 0x3700});
  for (int node_size : {0, 1, 4}) {
    EXPECT_EQ(ht_combine(p, rows, {}, node_size).x[0], std::vector<uint16_t>(8, 0x3F81)) << node_size;
  }
  EXPECT_EQ(ht_combine(p, rows, {}, 2).x[0], std::vector<uint16_t>(8, 0x3F80));
  EXPECT_THROW(ht_combine(p, rows, {}, 3), std::invalid_argument);
}

TEST(HtDispatch, Fp8PayloadIsCopiedUnchanged) {
  // R=2, E=2, H=256, K=1; rank 0 token 0 -> expert 1 (rank 1), token 1 masked.
  Problem p;
  p.nranks = 2;
  p.num_experts = 2;
  p.hidden = 256;
  p.topk = 1;
  p.max_tokens = 2;
  p.ranks.resize(2);
  p.ranks[0].num_tokens = 2;
  p.ranks[0].topk_idx = {1, -1};
  p.ranks[0].topk_weights = {0.5f, 0.5f};
  for (int i = 0; i < 512; ++i) p.ranks[0].x_fp8.push_back(static_cast<uint8_t>(i * 7));
  p.ranks[0].fp8_scales = {0.25f, 3.0f, 5.0f, 6.0f};
  HtDispatchOptions options;
  options.payload = HtPayload::kFp8;
  const auto results = ht_dispatch(p, options);  // no 16-bit x needed
  EXPECT_EQ(results[0].num_recv, 0);
  ASSERT_EQ(results[1].num_recv, 1);
  EXPECT_TRUE(results[1].is_fp8);
  EXPECT_TRUE(results[1].x.empty());
  ASSERT_EQ(results[1].x_fp8.size(), 256u);
  for (int c = 0; c < 256; ++c) EXPECT_EQ(results[1].x_fp8[c], static_cast<uint8_t>(c * 7));
  EXPECT_EQ(results[1].fp8_scales, (std::vector<float>{0.25f, 3.0f}));
  EXPECT_EQ(results[1].recv_topk_idx, (std::vector<int32_t>{0}));
  EXPECT_EQ(results[1].recv_topk_weights, (std::vector<float>{0.5f}));

  p.hidden = 64;  // fp8 needs H % 128 == 0
  p.ranks[0].x_fp8.resize(128);
  p.ranks[0].fp8_scales.clear();
  EXPECT_THROW(ht_dispatch(p, options), std::invalid_argument);
}

// ---- properties over random problems -----------------------------------------------------

TEST(HtDispatch, RandomProblemsReceiveEachTokenOncePerRank) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    ProblemGenOptions o;
    o.nranks = 1 + static_cast<int>(seed % 4);
    o.num_experts = o.nranks * 2;
    o.hidden = 16;
    o.topk = 1 + static_cast<int>(seed % 3);
    o.max_tokens = 6;
    o.seed = seed;
    o.random_token_counts = true;
    o.masked_fraction = 0.3;
    o.hot_expert_share = 0.4;
    o.allow_duplicate_experts = seed % 2 == 0;
    const Problem p = make_random_problem(o);
    const int L = p.local_experts();
    const auto results = ht_dispatch(p);
    int expected_pairs = 0;
    int expected_entries = 0;
    for (const RankTokens& rank : p.ranks) {
      for (int t = 0; t < rank.num_tokens; ++t) {
        std::vector<bool> dest(p.nranks, false);
        for (int k = 0; k < p.topk; ++k) {
          const int64_t e = rank.topk_idx[t * p.topk + k];
          if (e == -1) continue;
          dest[e / L] = true;
          ++expected_entries;
        }
        for (bool d : dest) expected_pairs += d;
      }
    }
    int pairs = 0;
    int entries = 0;
    for (int q = 0; q < p.nranks; ++q) {
      const HtDispatchResult& out = results[q];
      pairs += out.num_recv;
      int from_ranks = 0;
      for (int n : out.tokens_from_rank) from_ranks += n;
      EXPECT_EQ(from_ranks, out.num_recv);
      for (int n : out.expert_counts) entries += n;
      for (int i = 0; i < out.num_recv; ++i) {
        if (i > 0) {
          const TokenRef& a = out.src[i - 1];
          const TokenRef& b = out.src[i];
          EXPECT_TRUE(a.src_rank < b.src_rank || (a.src_rank == b.src_rank && a.src_token < b.src_token));
        }
        const RankTokens& src = p.ranks[out.src[i].src_rank];
        bool any_local = false;
        for (int k = 0; k < p.topk; ++k) {
          const int64_t e = src.topk_idx[out.src[i].src_token * p.topk + k];
          const bool local = e != -1 && e / L == q;
          any_local = any_local || local;
          EXPECT_EQ(out.recv_topk_idx[i * p.topk + k], local ? e - q * L : -1);
          EXPECT_EQ(out.recv_topk_weights[i * p.topk + k],
                    local ? src.topk_weights[out.src[i].src_token * p.topk + k] : 0.0f);
        }
        EXPECT_TRUE(any_local);
      }
    }
    EXPECT_EQ(pairs, expected_pairs) << "seed " << seed;
    EXPECT_EQ(entries, expected_entries) << "seed " << seed;
  }
}

TEST(HtCombine, CombineOfDispatchSumsCopies) {
  // Combining the dispatched rows unchanged adds x once per destination rank: n * x, exact in
  // float for n <= 4 and a bf16 x, then rounded once to bf16.
  ProblemGenOptions o;
  o.nranks = 4;
  o.num_experts = 8;
  o.hidden = 32;
  o.topk = 4;
  o.max_tokens = 5;
  o.masked_fraction = 0.3;
  o.seed = 11;
  const Problem p = make_random_problem(o);
  const auto dispatched = ht_dispatch(p);
  std::vector<std::vector<uint16_t>> rows;
  for (const HtDispatchResult& out : dispatched) rows.push_back(out.x);
  const HtCombineResult combined = ht_combine(p, rows);
  const HtLayout layout = ht_layout(p);
  for (int r = 0; r < p.nranks; ++r) {
    for (int t = 0; t < p.ranks[r].num_tokens; ++t) {
      int destinations = 0;
      for (int d = 0; d < p.nranks; ++d) destinations += layout.token_row[r][t * p.nranks + d] != -1;
      for (int c = 0; c < p.hidden; ++c) {
        const float x = bf16_to_float(p.ranks[r].x[t * p.hidden + c]);
        const uint16_t expected = float_to_bf16(static_cast<float>(destinations) * x);
        EXPECT_EQ(combined.x[r][t * p.hidden + c], destinations == 0 ? 0 : expected);
      }
    }
  }
}

// ---- 2.0 outputs: global expert ids, output dtypes -------------------------------------------

TEST(HtDispatch, GlobalExpertIdsAddTheRanksFirstExpert) {
  HtDispatchOptions global;
  global.global_expert_ids = true;
  const auto local = ht_dispatch(hand_problem());
  const auto results = ht_dispatch(hand_problem(), global);
  // Rank 0 hosts experts 0 and 1 (local ids are global ids); rank 1 hosts 2 and 3.
  EXPECT_EQ(results[0].recv_topk_idx, local[0].recv_topk_idx);
  // Rank 1 receives (0,0) [-1, 0], (0,1) [1, -1], (1,0) [0, -1] in local ids.
  EXPECT_EQ(local[1].recv_topk_idx, (std::vector<int32_t>{-1, 0, 1, -1, 0, -1}));
  EXPECT_EQ(results[1].recv_topk_idx, (std::vector<int32_t>{-1, 2, 3, -1, 2, -1}));
  // Nothing else changes.
  EXPECT_EQ(results[1].expert_counts, local[1].expert_counts);
  EXPECT_EQ(results[1].recv_topk_weights, local[1].recv_topk_weights);
  EXPECT_EQ(results[1].x, local[1].x);
}

TEST(HtCombine, SumsAreTheUnroundedAccumulator) {
  // 1.0 from rank 0 and 2^-8 from rank 1: 1 + 2^-8, a bf16 tie (0x3F80), exact in fp16
  // (0x3C04) and fp32.
  const Problem p = one_token_of_rank0(2, {0, 1});
  const HtCombineResult result = ht_combine(p, rows_of({0x3F80, 0x3B80}));
  ASSERT_EQ(result.sums.size(), 2u);
  EXPECT_EQ(result.sums[0], std::vector<float>(8, 1.00390625f));
  EXPECT_TRUE(result.sums[1].empty());
  EXPECT_EQ(result.x[0], std::vector<uint16_t>(8, 0x3F80));
  EXPECT_EQ(round_sums(result.sums[0], Dtype::kFp16), std::vector<uint16_t>(8, 0x3C04));
  // Across nodes of one rank each the sum is the same; the sums follow the node order too.
  EXPECT_EQ(ht_combine(p, rows_of({0x3F80, 0x3B80}), {}, 1).sums[0], std::vector<float>(8, 1.00390625f));
  // Past fp16's range: +inf, not saturated.
  const HtCombineResult big = ht_combine(p, rows_of({0x471C, 0x471C}));
  EXPECT_EQ(big.sums[0], std::vector<float>(8, 79872.0f));
  EXPECT_EQ(round_sums(big.sums[0], Dtype::kFp16), std::vector<uint16_t>(8, 0x7C00));
}

TEST(HtCombine, RoundedSumsAreTheBf16Output) {
  const HtCombineResult result = ht_combine(hand_problem(), hand_rows());
  ASSERT_EQ(result.sums.size(), result.x.size());
  for (std::size_t r = 0; r < result.x.size(); ++r) EXPECT_EQ(round_sums(result.sums[r], Dtype::kBf16), result.x[r]);
}

// ---- validation ---------------------------------------------------------------------------

TEST(HtValidation, RejectsBadProblems) {
  const auto rejects = [](auto mutate) {
    Problem p = hand_problem();
    mutate(p);
    EXPECT_THROW(ht_dispatch(p), std::invalid_argument);
  };
  rejects([](Problem& p) {
    p.num_experts = 8;
    p.nranks = 4;
  });                                              // ranks.size() != nranks
  rejects([](Problem& p) { p.num_experts = 3; });  // E % R != 0
  rejects([](Problem& p) { p.hidden = 4; });
  rejects([](Problem& p) { p.topk = 40; });
  rejects([](Problem& p) { p.ranks[0].num_tokens = 4; });  // > T and sizes disagree
  rejects([](Problem& p) { p.ranks[0].topk_idx[0] = 100; });
  rejects([](Problem& p) { p.ranks[1].x.push_back(0); });
  HtDispatchOptions fp8;
  fp8.payload = HtPayload::kFp8;
  EXPECT_THROW(ht_dispatch(hand_problem(), fp8), std::invalid_argument);  // H = 8
}

TEST(HtValidation, RejectsWrongCombineInput) {
  auto rows = hand_rows();
  rows[0].pop_back();
  EXPECT_THROW(ht_combine(hand_problem(), rows), std::invalid_argument);
  const std::vector<std::vector<float>> short_weights = {{1, 2, 3, 4, 5, 6, 7, 8}, {1, 2}};
  EXPECT_THROW(ht_combine(hand_problem(), hand_rows(), short_weights), std::invalid_argument);
  const std::vector<std::vector<float>> one_rank = {{1, 2, 3, 4, 5, 6, 7, 8}};
  EXPECT_THROW(ht_combine(hand_problem(), hand_rows(), one_rank), std::invalid_argument);
}

}  // namespace
}  // namespace epc::ref
