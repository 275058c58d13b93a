// SPDX-License-Identifier: Apache-2.0
// Low-Latency reference model: a small routing checked by hand, rounding-order cases whose
// expected bits are derived in the comments, properties over random problems, validation,
// and the deterministic problem generator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "tests/reference/problem_gen.hpp"
#include "tests/reference/reference.hpp"
#include "tests/unit/reference_hand_case.hpp"

namespace epc::ref {
namespace {

using hand_case::exact_bf16;
using hand_case::hand_problem;
using hand_case::payload;

struct ExpectedRow {
  int rank, local_expert, row;
  int src_rank, src_token, slot;
  float weight;
};

// Worked out from hand_problem by listing, per expert, its entries in (r, t, k) order.
const std::vector<ExpectedRow> kHandRows = {
    {0, 0, 0, 0, 2, 0, 1.0f},                            // expert 0
    {0, 0, 1, 1, 0, 1, 1.0f}, {0, 1, 0, 0, 0, 0, 0.5f},  // expert 1
    {0, 1, 1, 0, 2, 1, 2.0f}, {0, 1, 2, 1, 1, 0, 0.5f},
    {0, 1, 3, 1, 1, 1, 1.5f}, {1, 0, 0, 0, 0, 1, 0.25f},  // expert 2
    {1, 0, 1, 1, 0, 0, 0.5f}, {1, 1, 0, 0, 1, 0, 0.5f},   // expert 3
};

TEST(LlDispatch, HandCheckedRouting) {
  const auto results = ll_dispatch(hand_problem());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].counts, (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(results[1].counts, (std::vector<int32_t>{2, 1}));
  std::set<std::tuple<int, int, int>> filled;
  for (const ExpectedRow& e : kHandRows) {
    const LlDispatchResult& out = results[e.rank];
    ASSERT_EQ(out.rows_per_expert, 6);
    const std::size_t row = out.row_index(e.local_expert, e.row);
    EXPECT_EQ(out.src[row].src_rank, e.src_rank);
    EXPECT_EQ(out.src[row].src_token, e.src_token);
    EXPECT_EQ(out.src[row].topk_slot, e.slot);
    EXPECT_EQ(out.src[row].weight, e.weight);
    for (int c = 0; c < 8; ++c) {
      EXPECT_EQ(out.x[row * 8 + c], payload(e.src_rank, e.src_token, c));
    }
    filled.insert({e.rank, e.local_expert, e.row});
  }
  // Every other row is zero padding with an empty SourceRef.
  for (int q = 0; q < 2; ++q) {
    for (int l = 0; l < 2; ++l) {
      for (int i = 0; i < 6; ++i) {
        if (filled.count({q, l, i})) continue;
        const std::size_t row = results[q].row_index(l, i);
        EXPECT_EQ(results[q].src[row].src_rank, -1);
        EXPECT_EQ(results[q].src[row].weight, 0.0f);
        for (int c = 0; c < 8; ++c) EXPECT_EQ(results[q].x[row * 8 + c], 0);
      }
    }
  }
  EXPECT_TRUE(results[0].x_fp8.empty());
}

TEST(LlDispatch, LayoutMatchesHandRouting) {
  const LlLayout layout = ll_layout(hand_problem());
  EXPECT_EQ(layout.entry_row[0], (std::vector<int32_t>{0, 0, 0, -1, 0, 1}));
  EXPECT_EQ(layout.entry_row[1], (std::vector<int32_t>{1, 1, 2, 3, -1, -1}));
}

// Expert outputs for hand_problem: every meaningful row of expert block (q, l) holds
// base + c in channel c; padding rows hold NaN so that reading one would show.
std::vector<std::vector<uint16_t>> hand_expert_outputs() {
  const float bases[2][2][4] = {{{10, 20, 0, 0}, {30, 40, 50, 60}}, {{70, 80, 0, 0}, {90, 0, 0, 0}}};
  const int counts[2][2] = {{2, 4}, {2, 1}};
  std::vector<std::vector<uint16_t>> y(2, std::vector<uint16_t>(2 * 6 * 8, 0x7FC0));
  for (int q = 0; q < 2; ++q) {
    for (int l = 0; l < 2; ++l) {
      for (int i = 0; i < counts[q][l]; ++i) {
        for (int c = 0; c < 8; ++c) {
          y[q][(l * 6 + i) * 8 + c] = exact_bf16(bases[q][l][i] + static_cast<float>(c));
        }
      }
    }
  }
  return y;
}

// out[r][t][c] written out per token from the weights and bases above; every value is exact
// in float and bf16, so both orders must give these.
std::vector<std::vector<uint16_t>> hand_combined() {
  std::vector<std::vector<uint16_t>> out(2, std::vector<uint16_t>(3 * 8));
  for (int c = 0; c < 8; ++c) {
    const float cf = static_cast<float>(c);
    out[0][0 * 8 + c] = exact_bf16(32.5f + 0.75f * cf);  // 0.5*(30+c) + 0.25*(70+c)
    out[0][1 * 8 + c] = exact_bf16(45.0f + 0.5f * cf);   // 0.5*(90+c); slot 1 masked
    out[0][2 * 8 + c] = exact_bf16(90.0f + 3.0f * cf);   // 1*(10+c) + 2*(40+c)
    out[1][0 * 8 + c] = exact_bf16(60.0f + 1.5f * cf);   // 0.5*(80+c) + 1*(20+c)
    out[1][1 * 8 + c] = exact_bf16(115.0f + 2.0f * cf);  // 0.5*(50+c) + 1.5*(60+c)
    out[1][2 * 8 + c] = 0x0000;                          // masked only
  }
  return out;
}

TEST(LlCombine, HandCheckedTopkOrder) {
  EXPECT_EQ(ll_combine(hand_problem(), hand_expert_outputs(), CombineOrder::kTopkOrder), hand_combined());
}

TEST(LlCombine, HandCheckedPerRankPrereduce) {
  EXPECT_EQ(ll_combine(hand_problem(), hand_expert_outputs(), CombineOrder::kPerRankPrereduce), hand_combined());
}

// One token, one row per expert, every channel of expert e's row = values[e].
Problem single_token_problem(int nranks, int num_experts, std::vector<int64_t> idx, std::vector<float> weights) {
  Problem p = hand_case::one_token_problem(nranks, num_experts, 0, std::move(idx), std::move(weights));
  p.ranks[0].x.assign(8, 0x3F80);  // 1.0 in every channel
  return p;
}

std::vector<std::vector<uint16_t>> one_row_per_expert(const Problem& p, const std::vector<uint16_t>& values) {
  const int L = p.local_experts();
  const int rows = p.nranks * p.max_tokens;
  std::vector<std::vector<uint16_t>> y(p.nranks, std::vector<uint16_t>(L * rows * 8, 0));
  for (int e = 0; e < p.num_experts; ++e) {
    for (int c = 0; c < 8; ++c) y[e / L][((e % L) * rows) * 8 + c] = values[e];
  }
  return y;
}

TEST(LlCombine, OrdersRoundDifferently) {
  // Entries: k0 -> expert 2 (rank 1) y=1, k1 -> expert 3 (rank 1) y=2^-8,
  //          k2 -> expert 0 (rank 0) y=2^-8; all weights 1.
  // kTopkOrder: 1 + 2^-8 + 2^-8 = 1 + 2^-7 exactly -> 0x3F81.
  // kPerRankPrereduce: rank 0 partial 2^-8 (exact); rank 1 partial 1 + 2^-8 is a bf16 tie ->
  //   1.0; acc = 2^-8 + 1.0 is again a tie -> 1.0 -> 0x3F80.
  const Problem p = single_token_problem(2, 4, {2, 3, 0}, {1.0f, 1.0f, 1.0f});
  const auto y = one_row_per_expert(p, {0x3B80, 0x0000, 0x3F80, 0x3B80});  // 2^-8 = 0x3B80
  const auto topk = ll_combine(p, y, CombineOrder::kTopkOrder);
  const auto prereduce = ll_combine(p, y, CombineOrder::kPerRankPrereduce);
  EXPECT_EQ(topk[0], std::vector<uint16_t>(8, 0x3F81));
  EXPECT_EQ(prereduce[0], std::vector<uint16_t>(8, 0x3F80));
  EXPECT_TRUE(topk[1].empty());
}

TEST(LlCombine, SlotOrderIsTheSummationOrder) {
  // One rank, experts 0..3 output 1, 2^-8, 2^-24, 2^-24 (0x3F80, 0x3B80, 0x3380, 0x3380).
  // Slots [0,1,2,3]: 1 + 2^-8 is exact; adding 2^-24 is a float tie that stays at the even
  //   1 + 2^-8, twice; bf16(1 + 2^-8) is a tie -> 1.0 (0x3F80).
  // Slots [3,2,1,0]: 2^-24 + 2^-24 = 2^-23; + 2^-8; + 1 = 1 + 2^-8 + 2^-23 exactly, above
  //   the bf16 tie -> 1 + 2^-7 (0x3F81).
  const std::vector<uint16_t> values = {0x3F80, 0x3B80, 0x3380, 0x3380};
  const Problem forward = single_token_problem(1, 4, {0, 1, 2, 3}, {1, 1, 1, 1});
  const Problem backward = single_token_problem(1, 4, {3, 2, 1, 0}, {1, 1, 1, 1});
  for (CombineOrder order : {CombineOrder::kTopkOrder, CombineOrder::kPerRankPrereduce}) {
    EXPECT_EQ(ll_combine(forward, one_row_per_expert(forward, values), order)[0], std::vector<uint16_t>(8, 0x3F80));
    EXPECT_EQ(ll_combine(backward, one_row_per_expert(backward, values), order)[0], std::vector<uint16_t>(8, 0x3F81));
  }
}

TEST(LlCombine, ProductIsRoundedBeforeTheAdd) {
  // k0: weight 1, y = -1 -> acc = -1. k1: weight w = 1 + 762*2^-23 (0x3F8002FA),
  // y = 1 + 2^-7 (0x3F81): w*y rounds to 1 + 2^-7 + 3*2^-15, so acc = 2^-7 + 3*2^-15, a bf16
  // tie (1.5 ulp) -> even -> 2^-7 + 2*2^-14 = 0x3C02. An FMA would keep the product exact,
  // land just below the tie and give 0x3C01.
  float w;
  const uint32_t w_bits = 0x3F8002FAu;
  std::memcpy(&w, &w_bits, sizeof w);
  const Problem p = single_token_problem(1, 2, {0, 1}, {1.0f, w});
  const auto y = one_row_per_expert(p, {0xBF80, 0x3F81});
  EXPECT_EQ(ll_combine(p, y, CombineOrder::kTopkOrder)[0], std::vector<uint16_t>(8, 0x3C02));
  EXPECT_EQ(ll_combine(p, y, CombineOrder::kPerRankPrereduce)[0], std::vector<uint16_t>(8, 0x3C02));
}

TEST(LlCombine, NegativeZeroBecomesPositiveZero) {
  // acc starts at +0.0f; +0 + (1 * -0) = +0.
  const Problem p = single_token_problem(1, 2, {1, -1}, {1.0f, 1.0f});
  const auto y = one_row_per_expert(p, {0x0000, 0x8000});
  EXPECT_EQ(ll_combine(p, y, CombineOrder::kTopkOrder)[0], std::vector<uint16_t>(8, 0x0000));
  EXPECT_EQ(ll_combine(p, y, CombineOrder::kPerRankPrereduce)[0], std::vector<uint16_t>(8, 0x0000));
}

// ---- combine output dtypes ---------------------------------------------------------------

// The fp32 accumulator is what ll_combine rounds to bf16; fp16 and fp32 outputs take the same
// accumulator. Two ranks with one expert each: 1.0 from rank 0, 2^-8 from rank 1 sum to
// 1 + 2^-8 = 1.00390625: a bf16 tie (rounds to even, 1.0 = 0x3F80), exact in fp16 (0x3C04)
// and fp32.
TEST(LlCombine, SumsAreTheUnroundedAccumulator) {
  const Problem p = single_token_problem(2, 2, {0, 1}, {1.0f, 1.0f});
  const auto y = one_row_per_expert(p, {0x3F80, 0x3B80});
  for (CombineOrder order : {CombineOrder::kTopkOrder, CombineOrder::kPerRankPrereduce}) {
    const auto sums = ll_combine_sums(p, y, order);
    ASSERT_EQ(sums.size(), 2u);
    EXPECT_EQ(sums[0], std::vector<float>(8, 1.00390625f));
    EXPECT_TRUE(sums[1].empty());
    EXPECT_EQ(round_sums(sums[0], Dtype::kBf16), std::vector<uint16_t>(8, 0x3F80));
    EXPECT_EQ(round_sums(sums[0], Dtype::kFp16), std::vector<uint16_t>(8, 0x3C04));
    EXPECT_EQ(ll_combine(p, y, order)[0], std::vector<uint16_t>(8, 0x3F80));
  }
}

// 39936 + 39936 = 79872: finite in bf16 (0x479C) and fp32, past fp16's range (+inf 0x7C00,
// as __float2half_rn: no saturation).
TEST(LlCombine, Fp16OutputOverflowsToInfinity) {
  const Problem p = single_token_problem(2, 2, {0, 1}, {1.0f, 1.0f});
  const auto y = one_row_per_expert(p, {0x471C, 0x471C});
  const auto sums = ll_combine_sums(p, y, CombineOrder::kPerRankPrereduce);
  EXPECT_EQ(sums[0], std::vector<float>(8, 79872.0f));
  EXPECT_EQ(round_sums(sums[0], Dtype::kBf16), std::vector<uint16_t>(8, 0x479C));
  EXPECT_EQ(round_sums(sums[0], Dtype::kFp16), std::vector<uint16_t>(8, 0x7C00));
}

// Over random problems, ll_combine is exactly float_to_bf16 of ll_combine_sums.
TEST(LlCombine, RoundedSumsAreTheBf16Output) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ProblemGenOptions o;
    o.nranks = 1 + static_cast<int>(seed % 3);
    o.num_experts = o.nranks * 3;
    o.hidden = 16;
    o.topk = 2;
    o.max_tokens = 4;
    o.seed = seed;
    o.random_token_counts = true;
    o.masked_fraction = 0.2;
    const Problem p = make_random_problem(o);
    const LlLayout layout = ll_layout(p);
    std::vector<std::vector<uint16_t>> y(p.nranks);
    uint16_t v = 0x3C00;
    for (auto& rank_y : y) {
      rank_y.resize(static_cast<std::size_t>(p.local_experts()) * layout.rows_per_expert * p.hidden);
      for (uint16_t& e : rank_y) e = v = static_cast<uint16_t>(0x3C00 + (v * 7 + 13) % 0x0700);
    }
    for (CombineOrder order : {CombineOrder::kTopkOrder, CombineOrder::kPerRankPrereduce}) {
      const auto sums = ll_combine_sums(p, y, order);
      const auto out = ll_combine(p, y, order);
      for (int r = 0; r < p.nranks; ++r) EXPECT_EQ(round_sums(sums[r], Dtype::kBf16), out[r]) << "seed " << seed;
    }
  }
}

// ---- fp8 dispatch -----------------------------------------------------------------------

// R=2, E=2 (one expert per rank), H=128, K=1, T=2; everything goes to expert 1 (rank 1)
// except rank 0's masked token 1.
Problem fp8_problem(Dtype dtype) {
  Problem p;
  p.nranks = 2;
  p.num_experts = 2;
  p.hidden = 128;
  p.topk = 1;
  p.max_tokens = 2;
  p.dtype = dtype;
  p.ranks.resize(2);
  for (RankTokens& rank : p.ranks) {
    rank.num_tokens = 2;
    rank.x.assign(2 * 128, 0);
    rank.topk_weights = {1.0f, 1.0f};
  }
  p.ranks[0].topk_idx = {1, -1};
  p.ranks[1].topk_idx = {1, 1};
  const bool bf16 = dtype == Dtype::kBf16;
  p.ranks[0].x[0] = bf16 ? 0x43E0 : 0x5F00;  // 448
  p.ranks[0].x[1] = bf16 ? 0xBF80 : 0xBC00;  // -1
  p.ranks[0].x[2] = bf16 ? 0x3F00 : 0x3800;  // 0.5
  p.ranks[1].x[0] = bf16 ? 0x4460 : 0x6300;  // 896
  p.ranks[1].x[1] = bf16 ? 0x4040 : 0x4200;  // 3
  return p;                                  // rank 1's token 1 stays all zero
}

void expect_fp8_rows(const LlDispatchResult& out, float zero_token_scale) {
  ASSERT_TRUE(out.is_fp8);
  EXPECT_EQ(out.counts, (std::vector<int32_t>{3}));
  EXPECT_TRUE(out.x.empty());
  // Row 0 = rank 0 token 0: amax 448 -> scale 1 -> 448, -1, 0.5.
  EXPECT_EQ(out.fp8_scales[0], 1.0f);
  EXPECT_EQ(out.x_fp8[0], 0x7E);
  EXPECT_EQ(out.x_fp8[1], 0xB8);
  EXPECT_EQ(out.x_fp8[2], 0x30);
  EXPECT_EQ(out.x_fp8[3], 0x00);
  // Row 1 = rank 1 token 0: amax 896 -> scale 2 -> 448, 1.5.
  EXPECT_EQ(out.fp8_scales[1], 2.0f);
  EXPECT_EQ(out.x_fp8[128], 0x7E);
  EXPECT_EQ(out.x_fp8[129], 0x3C);
  // Row 2 = rank 1 token 1, all zero: amax clamps to 1e-4.
  EXPECT_EQ(out.fp8_scales[2], zero_token_scale);
  for (int c = 0; c < 128; ++c) EXPECT_EQ(out.x_fp8[256 + c], 0x00);
  EXPECT_EQ(out.src[2].src_rank, 1);
  EXPECT_EQ(out.src[2].src_token, 1);
  // Row 3 is padding.
  EXPECT_EQ(out.fp8_scales[3], 0.0f);
}

TEST(LlDispatch, Fp8HandChecked) {
  LlDispatchOptions options;
  options.use_fp8 = true;
  const auto results = ll_dispatch(fp8_problem(Dtype::kBf16), options);
  EXPECT_EQ(results[0].counts, (std::vector<int32_t>{0}));
  expect_fp8_rows(results[1], 1e-4f / 448.0f);
  // The same values given as fp16 quantize identically.
  expect_fp8_rows(ll_dispatch(fp8_problem(Dtype::kFp16), options)[1], 1e-4f / 448.0f);
  // UE8M0: 1 and 2 are powers of two already; 1e-4/448 rounds up to 2^-22.
  options.round_scale_ue8m0 = true;
  expect_fp8_rows(ll_dispatch(fp8_problem(Dtype::kBf16), options)[1], std::ldexp(1.0f, -22));
}

TEST(LlDispatch, Fp16PayloadIsCopiedUnchanged) {
  Problem p = hand_problem();
  p.dtype = Dtype::kFp16;
  const auto results = ll_dispatch(p);
  const std::size_t row = results[1].row_index(1, 0);  // expert 3 row 0 = rank 0 token 1
  for (int c = 0; c < 8; ++c) EXPECT_EQ(results[1].x[row * 8 + c], payload(0, 1, c));
}

// ---- properties over random problems -----------------------------------------------------

TEST(LlDispatch, RandomProblemsPackEveryEntryOnceInOrder) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    ProblemGenOptions o;
    o.nranks = 1 + static_cast<int>(seed % 4);
    o.num_experts = o.nranks * 3;
    o.hidden = 16;
    o.topk = 1 + static_cast<int>(seed % 3);
    o.max_tokens = 5;
    o.seed = seed;
    o.random_token_counts = true;
    o.masked_fraction = 0.2;
    o.hot_expert_share = 0.5;
    const Problem p = make_random_problem(o);
    const auto results = ll_dispatch(p);
    std::set<std::tuple<int, int, int>> seen;
    for (int q = 0; q < p.nranks; ++q) {
      const LlDispatchResult& out = results[q];
      for (int l = 0; l < out.local_experts; ++l) {
        std::tuple<int, int, int> previous{-1, -1, -1};
        for (int i = 0; i < out.counts[l]; ++i) {
          const std::size_t row = out.row_index(l, i);
          const SourceRef& s = out.src[row];
          const std::tuple<int, int, int> key{s.src_rank, s.src_token, s.topk_slot};
          EXPECT_LT(previous, key) << "rows must ascend by (rank, token, slot)";
          previous = key;
          const RankTokens& src = p.ranks[s.src_rank];
          const std::size_t entry = static_cast<std::size_t>(s.src_token) * p.topk + s.topk_slot;
          EXPECT_EQ(src.topk_idx[entry], q * out.local_experts + l);
          EXPECT_EQ(s.weight, src.topk_weights[entry]);
          for (int c = 0; c < p.hidden; ++c) {
            EXPECT_EQ(out.x[row * p.hidden + c], src.x[s.src_token * p.hidden + c]);
          }
          EXPECT_TRUE(seen.insert(key).second);
        }
      }
    }
    std::size_t unmasked = 0;
    for (const RankTokens& rank : p.ranks) {
      for (int64_t e : rank.topk_idx) unmasked += e != -1;
    }
    EXPECT_EQ(seen.size(), unmasked) << "seed " << seed;
  }
}

TEST(LlCombine, SingleEntryWithUnitWeightRoundTrips) {
  // With one unmasked entry of weight 1 per token, combine(dispatch(x)) = 0 + 1*x = x.
  ProblemGenOptions o;
  o.nranks = 3;
  o.num_experts = 6;
  o.hidden = 24;
  o.topk = 1;
  o.max_tokens = 4;
  o.seed = 7;
  Problem p = make_random_problem(o);
  for (RankTokens& rank : p.ranks) rank.topk_weights.assign(rank.topk_weights.size(), 1.0f);
  const auto dispatched = ll_dispatch(p);
  std::vector<std::vector<uint16_t>> y;
  for (const LlDispatchResult& out : dispatched) y.push_back(out.x);
  for (CombineOrder order : {CombineOrder::kTopkOrder, CombineOrder::kPerRankPrereduce}) {
    const auto combined = ll_combine(p, y, order);
    for (int r = 0; r < p.nranks; ++r) EXPECT_EQ(combined[r], p.ranks[r].x) << r;
  }
}

TEST(LlDispatch, Deterministic) {
  ProblemGenOptions o;
  o.seed = 3;
  o.masked_fraction = 0.3;
  const Problem p = make_random_problem(o);
  LlDispatchOptions fp8;
  fp8.use_fp8 = true;
  const auto a = ll_dispatch(p, fp8);
  const auto b = ll_dispatch(p, fp8);
  for (std::size_t q = 0; q < a.size(); ++q) {
    EXPECT_EQ(a[q].x_fp8, b[q].x_fp8);
    EXPECT_EQ(a[q].fp8_scales, b[q].fp8_scales);
    EXPECT_EQ(a[q].counts, b[q].counts);
  }
}

// ---- validation ---------------------------------------------------------------------------

TEST(LlValidation, RejectsBadProblems) {
  const auto rejects = [](auto mutate) {
    Problem p = hand_problem();
    mutate(p);
    EXPECT_THROW(ll_dispatch(p), std::invalid_argument);
  };
  rejects([](Problem& p) { p.num_experts = 5; });  // E % R != 0
  rejects([](Problem& p) { p.hidden = 0; });
  rejects([](Problem& p) { p.hidden = 12; });  // H % 8 != 0
  rejects([](Problem& p) { p.topk = 0; });
  rejects([](Problem& p) { p.topk = 33; });
  rejects([](Problem& p) { p.max_tokens = 2; });            // B_r = 3 > T
  rejects([](Problem& p) { p.ranks[1].topk_idx[3] = 4; });  // id == E
  rejects([](Problem& p) { p.ranks[1].topk_idx[3] = -2; });
  rejects([](Problem& p) { p.ranks[0].x.pop_back(); });
  rejects([](Problem& p) { p.ranks[0].topk_weights.pop_back(); });
  rejects([](Problem& p) { p.ranks.pop_back(); });
  rejects([](Problem& p) { p.nranks = 0; });
}

TEST(LlValidation, RejectsFp8WithHiddenNotMultipleOf128) {
  LlDispatchOptions options;
  options.use_fp8 = true;
  EXPECT_THROW(ll_dispatch(hand_problem(), options), std::invalid_argument);
}

TEST(LlValidation, RejectsDuplicatesThatOverflowAnExpert) {
  // R*T = 1 row per expert, but the token names expert 0 twice.
  const Problem p = single_token_problem(1, 1, {0, 0}, {1.0f, 1.0f});
  EXPECT_THROW(ll_dispatch(p), std::invalid_argument);
}

TEST(LlValidation, RejectsWrongCombineInput) {
  auto y = hand_expert_outputs();
  y[1].pop_back();
  EXPECT_THROW(ll_combine(hand_problem(), y, CombineOrder::kTopkOrder), std::invalid_argument);
  y.pop_back();
  EXPECT_THROW(ll_combine(hand_problem(), y, CombineOrder::kTopkOrder), std::invalid_argument);
}

TEST(LlValidation, MessageNamesTheField) {
  Problem p = hand_problem();
  p.ranks[1].topk_idx[3] = 9;
  try {
    ll_dispatch(p);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("topk_idx[rank 1][token 1][slot 1] = 9"), std::string::npos) << e.what();
  }
}

// ---- problem generator ------------------------------------------------------------------

TEST(ProblemGen, SameSeedSameProblem) {
  ProblemGenOptions o;
  o.seed = 42;
  o.random_token_counts = true;
  o.masked_fraction = 0.25;
  const Problem a = make_random_problem(o);
  const Problem b = make_random_problem(o);
  o.seed = 43;
  const Problem c = make_random_problem(o);
  bool any_difference = false;
  for (int r = 0; r < a.nranks; ++r) {
    EXPECT_EQ(a.ranks[r].num_tokens, b.ranks[r].num_tokens);
    EXPECT_EQ(a.ranks[r].x, b.ranks[r].x);
    EXPECT_EQ(a.ranks[r].topk_idx, b.ranks[r].topk_idx);
    EXPECT_EQ(a.ranks[r].topk_weights, b.ranks[r].topk_weights);
    any_difference = any_difference || a.ranks[r].x != c.ranks[r].x;
  }
  EXPECT_TRUE(any_difference);
}

TEST(ProblemGen, ShapesAndRanges) {
  ProblemGenOptions o;
  o.nranks = 4;
  o.num_experts = 16;
  o.hidden = 256;
  o.topk = 4;
  o.max_tokens = 9;
  o.random_token_counts = true;
  o.with_fp8 = true;
  o.seed = 5;
  const Problem p = make_random_problem(o);
  for (const RankTokens& rank : p.ranks) {
    ASSERT_GE(rank.num_tokens, 0);
    ASSERT_LE(rank.num_tokens, 9);
    EXPECT_EQ(rank.x_fp8.size(), static_cast<std::size_t>(rank.num_tokens) * 256);
    EXPECT_EQ(rank.fp8_scales.size(), static_cast<std::size_t>(rank.num_tokens) * 2);
    for (int t = 0; t < rank.num_tokens; ++t) {
      std::set<int64_t> experts;
      for (int k = 0; k < 4; ++k) {
        const int64_t e = rank.topk_idx[t * 4 + k];
        EXPECT_TRUE(e >= 0 && e < 16);
        EXPECT_TRUE(experts.insert(e).second) << "duplicates were not allowed";
        const float w = rank.topk_weights[t * 4 + k];
        EXPECT_TRUE(w >= 0.0f && w < 1.0f);
      }
      for (int c = 0; c < 256; ++c) {
        const float v = bf16_to_float(rank.x[t * 256 + c]);
        EXPECT_TRUE(v >= -4.0f && v <= 4.0f) << v;
      }
    }
  }
}

TEST(ProblemGen, HotExpertAndMasking) {
  ProblemGenOptions o;
  o.topk = 3;
  o.hot_expert = 5;
  o.hot_expert_share = 1.0;  // every token must contain expert 5 (once, no duplicates)
  const Problem hot = make_random_problem(o);
  for (const RankTokens& rank : hot.ranks) {
    for (int t = 0; t < rank.num_tokens; ++t) {
      int hits = 0;
      for (int k = 0; k < 3; ++k) hits += rank.topk_idx[t * 3 + k] == 5;
      EXPECT_EQ(hits, 1);
    }
  }
  o.hot_expert_share = 0.0;
  o.masked_fraction = 1.0;
  const Problem masked = make_random_problem(o);
  for (const RankTokens& rank : masked.ranks) {
    for (int64_t e : rank.topk_idx) EXPECT_EQ(e, -1);
  }
}

TEST(ProblemGen, RejectsImpossibleOptions) {
  ProblemGenOptions o;
  o.topk = 9;  // > 8 experts without duplicates
  EXPECT_THROW(make_random_problem(o), std::invalid_argument);
  o.allow_duplicate_experts = true;
  EXPECT_NO_THROW(make_random_problem(o));
  ProblemGenOptions bad_share;
  bad_share.hot_expert_share = 1.5;
  EXPECT_THROW(make_random_problem(bad_share), std::invalid_argument);
  ProblemGenOptions bad_fp8;
  bad_fp8.hidden = 64;
  bad_fp8.with_fp8 = true;
  EXPECT_THROW(make_random_problem(bad_fp8), std::invalid_argument);
  ProblemGenOptions bad_experts;
  bad_experts.num_experts = 7;
  EXPECT_THROW(make_random_problem(bad_experts), std::invalid_argument);
}

}  // namespace
}  // namespace epc::ref
