// SPDX-License-Identifier: Apache-2.0
// The HT EXPERT_PACKED layout of the reference model: the hand-worked routing at alignments
// 1 and 4 (row order, zone offsets, padding, weights), its combine weighted and unweighted,
// across nodes (a hand case where the node order changes the rounding), backward weights,
// the default capacity, and properties over random problems.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "tests/reference/problem_gen.hpp"
#include "tests/reference/reference_ht_packed.hpp"
#include "tests/unit/reference_hand_case.hpp"

namespace epc::ref {
namespace {

using hand_case::exact_bf16;
using hand_case::hand_problem;
using hand_case::one_token_problem;
using hand_case::payload;

// The 16-bit payload of row `row` (8 channels) as a token reference: the payload() of the
// hand case encodes (rank, token) in every channel.
uint16_t first_channel(const HtPackedResult& out, int row) {
  uint16_t v;
  std::memcpy(&v, out.payload.data() + static_cast<size_t>(row) * out.row_bytes, sizeof v);
  return v;
}

TEST(HtPacked, HandCheckedRoutingAlignedToOne) {
  const auto results = ht_dispatch_packed(hand_problem());
  ASSERT_EQ(results.size(), 2u);
  // Rank 0: expert 0 <- (0,2,0) (1,0,1); expert 1 <- (0,0,0) (0,2,1) (1,1,0) (1,1,1).
  const HtPackedResult& r0 = results[0];
  EXPECT_EQ(r0.expert_counts, (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(r0.expert_offsets, (std::vector<int64_t>{0, 2, 6}));
  EXPECT_EQ(r0.rows, 6);
  EXPECT_EQ(r0.num_recv, 6);
  const int src0[][3] = {{0, 2, 0}, {1, 0, 1}, {0, 0, 0}, {0, 2, 1}, {1, 1, 0}, {1, 1, 1}};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(r0.src[i].src_rank, src0[i][0]) << i;
    EXPECT_EQ(r0.src[i].src_token, src0[i][1]) << i;
    EXPECT_EQ(r0.src[i].topk_slot, src0[i][2]) << i;
    EXPECT_EQ(first_channel(r0, i), payload(src0[i][0], src0[i][1], 0)) << i;
  }
  EXPECT_EQ(r0.weights, (std::vector<float>{1.0f, 1.0f, 0.5f, 2.0f, 0.5f, 1.5f}));
  // Rank 1: expert 2 <- (0,0,1) (1,0,0); expert 3 <- (0,1,0).
  const HtPackedResult& r1 = results[1];
  EXPECT_EQ(r1.expert_counts, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(r1.expert_offsets, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(r1.weights, (std::vector<float>{0.25f, 0.5f, 0.5f}));
  EXPECT_EQ(first_channel(r1, 2), payload(0, 1, 0));
}

TEST(HtPacked, HandCheckedRoutingAlignedToFourPadsWithZeros) {
  HtPackedOptions o;
  o.alignment = 4;
  const auto results = ht_dispatch_packed(hand_problem(), o);
  const HtPackedResult& r0 = results[0];
  EXPECT_EQ(r0.expert_offsets, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(r0.rows, 8);
  EXPECT_EQ(r0.num_recv, 6);  // padding excluded
  // Rows 2 and 3 pad expert 0; expert 1 starts at row 4.
  for (int row : {2, 3}) {
    EXPECT_EQ(r0.src[row].src_rank, -1);
    EXPECT_EQ(r0.weights[row], 0.0f);
    for (int b = 0; b < r0.row_bytes; ++b) EXPECT_EQ(r0.payload[row * r0.row_bytes + b], 0);
  }
  EXPECT_EQ(r0.src[4].src_token, 0);
  EXPECT_EQ(r0.src[7].topk_slot, 1);
  const HtPackedResult& r1 = results[1];
  EXPECT_EQ(r1.expert_offsets, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(first_channel(r1, 4), payload(0, 1, 0));
}

// y on rank q, row i: (i + 1) * (q == 0 ? 1 : 10) in every channel.
std::vector<std::vector<uint16_t>> numbered_rows(const std::vector<HtPackedResult>& results) {
  std::vector<std::vector<uint16_t>> y(results.size());
  for (size_t q = 0; q < results.size(); ++q) {
    for (int i = 0; i < results[q].rows; ++i) {
      y[q].insert(y[q].end(), 8, exact_bf16(static_cast<float>((i + 1) * (q == 0 ? 1 : 10))));
    }
  }
  return y;
}

TEST(HtPacked, HandCheckedCombineWeightsOnTheExpertsRank) {
  const Problem p = hand_problem();
  const auto y = numbered_rows(ht_dispatch_packed(p));
  const HtCombineResult out = ht_combine_packed(p, y, /*weighted=*/true);
  // (0,0): rank 0 row 2 (y 3) * 0.5 + rank 1 row 0 (y 10) * 0.25 = 1.5 + 2.5.
  EXPECT_EQ(out.x[0][0 * 8], exact_bf16(4.0f));
  // (0,1): rank 1 row 2 (y 30) * 0.5.
  EXPECT_EQ(out.x[0][1 * 8], exact_bf16(15.0f));
  // (1,1): rank 0 rows 4 and 5 (y 5, 6) * 0.5, 1.5, one partial.
  EXPECT_EQ(out.x[1][1 * 8], exact_bf16(11.5f));
  EXPECT_EQ(out.x[1][2 * 8], 0);  // masked only
  const HtCombineResult plain = ht_combine_packed(p, y, /*weighted=*/false);
  EXPECT_EQ(plain.x[0][0], exact_bf16(13.0f));  // 3 + 10
  EXPECT_EQ(plain.x[1][8], exact_bf16(11.0f));  // 5 + 6
}

TEST(HtPacked, PartialSumsInFp32AndRoundsOnce) {
  // One rank, one token with four entries on it: 1 + 3 * 2^-9 in fp32 rounds to 1 + 2^-7 in
  // bf16, where rounding after every addition would stay at 1.
  const Problem p = one_token_problem(1, 4, 0, {0, 1, 2, 3}, {1.0f, 1.0f, 1.0f, 1.0f});
  std::vector<std::vector<uint16_t>> y = {std::vector<uint16_t>(32, exact_bf16(1.0f / 512.0f))};
  for (int c = 0; c < 8; ++c) y[0][c] = exact_bf16(1.0f);
  const HtCombineResult out = ht_combine_packed(p, y, true);
  EXPECT_EQ(out.x[0][0], exact_bf16(1.0f + 1.0f / 128.0f));
  EXPECT_EQ(out.sums[0][0], 1.0f + 1.0f / 128.0f);  // the bf16 partial, summed over one rank
}

// Across nodes another node's partials are summed into one, rounded to bf16, before they
// reach the token's rank. Rank 3's token has one entry on each of ranks 0, 1 and 2, whose
// rows (the partials, unweighted) are 2^-8, 1 and 2^-8. One node, or nodes of one rank:
// 2^-8 + 1 + 2^-8 = 1 + 2^-7 in fp32, exact in bf16. Nodes of 2: node 0's partial
// 2^-8 + 1 rounds (to even) to 1 in bf16; rank 3's own node adds rank 2's 2^-8, and
// 1 + 2^-8 rounds to 1 again.
TEST(HtPacked, AcrossNodesNodeOrderRounds) {
  const Problem p = one_token_problem(4, 4, 3, {0, 1, 2}, {1.0f, 1.0f, 1.0f});
  const float tiny = 1.0f / 256.0f;
  std::vector<std::vector<uint16_t>> y = {std::vector<uint16_t>(8, exact_bf16(tiny)),
                                          std::vector<uint16_t>(8, exact_bf16(1.0f)),
                                          std::vector<uint16_t>(8, exact_bf16(tiny)),
                                          {}};
  for (int node_size : {0, 1, 4}) {
    const HtCombineResult out = ht_combine_packed(p, y, /*weighted=*/false, 0, {}, node_size);
    EXPECT_EQ(out.x[3][0], exact_bf16(1.0f + 1.0f / 128.0f)) << node_size;
    EXPECT_EQ(out.sums[3][7], 1.0f + 1.0f / 128.0f) << node_size;
  }
  const HtCombineResult pairs = ht_combine_packed(p, y, /*weighted=*/false, 0, {}, 2);
  EXPECT_EQ(pairs.x[3][0], exact_bf16(1.0f));
  EXPECT_EQ(pairs.sums[3][0], 1.0f + tiny);
  for (int c = 1; c < 8; ++c) EXPECT_EQ(pairs.x[3][c], pairs.x[3][0]) << c;
  // Weighted alike (every weight 1), and the token's own node first changes nothing here.
  EXPECT_EQ(ht_combine_packed(p, y, /*weighted=*/true, 0, {}, 2).x, pairs.x);
  EXPECT_THROW(ht_combine_packed(p, y, false, 0, {}, 3), std::invalid_argument);
  EXPECT_THROW(ht_combine_packed(p, y, false, 0, {}, -1), std::invalid_argument);
}

// Nodes of one rank, or one node of every rank, give the one-node order on any routing;
// backward weights do not depend on the nodes.
TEST(HtPacked, AcrossNodesOfOneRankIsTheOneNodeOrder) {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    ProblemGenOptions o;
    o.nranks = 4;
    o.num_experts = 8;
    o.hidden = 16;
    o.topk = 3;
    o.max_tokens = 5;
    o.seed = seed;
    o.random_token_counts = true;
    o.masked_fraction = 0.2;
    o.allow_duplicate_experts = seed % 2 == 0;
    const Problem p = make_random_problem(o);
    const auto results = ht_dispatch_packed(p);
    std::vector<std::vector<uint16_t>> y(4);
    std::vector<std::vector<float>> g(4);
    for (int q = 0; q < 4; ++q) {
      for (int i = 0; i < results[q].rows * 16; ++i) {
        y[q].push_back(exact_bf16(static_cast<float>((i * 7 + q * 13 + static_cast<int>(seed)) % 23 - 11) / 8.0f));
      }
      for (int i = 0; i < results[q].rows; ++i) g[q].push_back(static_cast<float>(q * 100 + i));
    }
    const HtCombineResult one = ht_combine_packed(p, y, true, 0, g);
    EXPECT_EQ(ht_combine_packed(p, y, true, 0, g, 1).x, one.x) << seed;
    EXPECT_EQ(ht_combine_packed(p, y, true, 0, g, 4).x, one.x) << seed;
    EXPECT_EQ(ht_combine_packed(p, y, true, 0, g, 2).topk_weights, one.topk_weights) << seed;
  }
}

TEST(HtPacked, BackwardWeightsComeFromTheEntrysRow) {
  const Problem p = hand_problem();
  const auto results = ht_dispatch_packed(p);
  const auto y = numbered_rows(results);
  std::vector<std::vector<float>> g(2);
  for (int q = 0; q < 2; ++q) {
    for (int i = 0; i < results[q].rows; ++i) g[q].push_back(static_cast<float>(100 * q + i));
  }
  const HtCombineResult out = ht_combine_packed(p, y, false, 0, g);
  // (0,0): k0 at rank 0 row 2, k1 at rank 1 row 0; (0,1): k1 masked; (1,1): rows 4, 5.
  EXPECT_EQ(out.topk_weights[0], (std::vector<float>{2.0f, 100.0f, 102.0f, 0.0f, 0.0f, 3.0f}));
  EXPECT_EQ(out.topk_weights[1], (std::vector<float>{101.0f, 1.0f, 4.0f, 5.0f, 0.0f, 0.0f}));
}

// EPC_WEIGHTING_HOME: the token's rank weights every entry's row by its own weights.
// Rows as numbered_rows: rank 0 row i = i + 1, rank 1 row i = 10 * (i + 1).
TEST(HtPacked, HandCheckedCombineWeightsAtHome) {
  const Problem p = hand_problem();
  const auto y = numbered_rows(ht_dispatch_packed(p));
  // Weights at home; masked entries' weights (9, 5) must play no part.
  const std::vector<std::vector<float>> home = {{0.25f, 2.0f, 4.0f, 9.0f, 0.5f, 0.125f},
                                                {3.0f, 0.5f, 1.0f, -1.0f, 5.0f, 5.0f}};
  const HtCombineResult out = ht_combine_packed_home(p, y, home);
  // (0,0): k0 rank 0 row 2 (3) * 0.25 + k1 rank 1 row 0 (10) * 2 = 0.75 + 20.
  EXPECT_EQ(out.x[0][0 * 8], exact_bf16(20.75f));
  // (0,1): k0 rank 1 row 2 (30) * 4; k1 masked.
  EXPECT_EQ(out.x[0][1 * 8], exact_bf16(120.0f));
  // (0,2): k0 rank 0 row 0 (1) * 0.5 + k1 rank 0 row 3 (4) * 0.125: two rows of one rank,
  // weighted one by one (no partial).
  EXPECT_EQ(out.x[0][2 * 8], exact_bf16(1.0f));
  // (1,0): k0 rank 1 row 1 (20) * 3 + k1 rank 0 row 1 (2) * 0.5.
  EXPECT_EQ(out.x[1][0 * 8], exact_bf16(61.0f));
  // (1,1): the duplicate expert's two rows, 5 * 1 + 6 * -1.
  EXPECT_EQ(out.x[1][1 * 8], exact_bf16(-1.0f));
  EXPECT_EQ(out.x[1][2 * 8], 0);  // masked only: +0
  EXPECT_EQ(out.sums[1][0], 61.0f);
  for (int c = 1; c < 8; ++c) EXPECT_EQ(out.x[0][c], out.x[0][0]) << c;
  // Backward weights are carried back as for the other weightings.
  std::vector<std::vector<float>> g = {{0, 1, 2, 3, 4, 5}, {100, 101, 102}};
  EXPECT_EQ(ht_combine_packed_home(p, y, home, 0, g).topk_weights, ht_combine_packed(p, y, false, 0, g).topk_weights);
  EXPECT_THROW(ht_combine_packed_home(p, y, {home[0]}), std::invalid_argument);
  EXPECT_THROW(ht_combine_packed_home(p, y, {home[0], {1.0f}}), std::invalid_argument);
}

// The home sum runs over the entries in top-k order, not rank by rank: 2^24 - 2^24 + 1 = 1,
// where rank 0's row first (1 + 2^24 rounds to 2^24) would give 0.
TEST(HtPacked, HomeSumsInTopkOrder) {
  const Problem p = one_token_problem(2, 2, 0, {1, 1, 0}, {0.0f, 0.0f, 0.0f});
  // Rank 1 rows: k0 then k1; rank 0 row: k2.
  std::vector<std::vector<uint16_t>> y = {std::vector<uint16_t>(8, exact_bf16(1.0f)), {}};
  for (float v : {16777216.0f, -16777216.0f}) y[1].insert(y[1].end(), 8, exact_bf16(v));
  const HtCombineResult out = ht_combine_packed_home(p, y, {{1.0f, 1.0f, 1.0f}, {}});
  EXPECT_EQ(out.sums[0][0], 1.0f);
  EXPECT_EQ(out.x[0][0], exact_bf16(1.0f));
  // Each row is scaled by its own entry's home weight: 0.5 * 2^24 - 0.5 * 2^24 + 3 * 1.
  const HtCombineResult scaled = ht_combine_packed_home(p, y, {{0.5f, 0.5f, 3.0f}, {}});
  EXPECT_EQ(scaled.x[0][0], exact_bf16(3.0f));
}

TEST(HtPacked, WorstRows) {
  EXPECT_EQ(ht_packed_zone_rows(0, 128), 0);
  EXPECT_EQ(ht_packed_zone_rows(1, 128), 128);
  EXPECT_EQ(ht_packed_zone_rows(5, 0), 5);
  EXPECT_EQ(ht_packed_worst_rows(5, 2, 4), 8);   // (1, 4) -> 4 + 4
  EXPECT_EQ(ht_packed_worst_rows(3, 8, 4), 12);  // three zones of one entry
  EXPECT_EQ(ht_packed_worst_rows(32768, 256, 1), 32768);
  EXPECT_EQ(ht_packed_worst_rows(32768, 256, 128), 32768 + 256 * 127 - (32768 + 256 * 127) % 128);
  EXPECT_THROW(ht_packed_zone_rows(3, -1), std::invalid_argument);
}

TEST(HtPacked, RandomProblemsFillZonesInOrder) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    ProblemGenOptions o;
    o.nranks = 1 + static_cast<int>(seed % 4);
    o.num_experts = o.nranks * 3;
    o.hidden = 16;
    o.topk = 1 + static_cast<int>(seed % 3);
    o.max_tokens = 7;
    o.seed = seed;
    o.random_token_counts = true;
    o.masked_fraction = 0.3;
    o.allow_duplicate_experts = seed % 2 == 0;
    const Problem p = make_random_problem(o);
    HtPackedOptions po;
    po.alignment = static_cast<int>(seed % 5);
    const auto results = ht_dispatch_packed(p, po);
    const int64_t a = po.alignment == 0 ? 1 : po.alignment;
    for (const HtPackedResult& out : results) {
      ASSERT_LE(out.rows, ht_packed_worst_rows(int64_t{o.nranks} * o.max_tokens * o.topk, p.local_experts(), a));
      for (int l = 0; l < p.local_experts(); ++l) {
        EXPECT_EQ(out.expert_offsets[l] % a, 0);
        int prev_r = -1, prev_t = -1, prev_k = -1;
        for (int64_t i = out.expert_offsets[l]; i < out.expert_offsets[l + 1]; ++i) {
          const SourceRef s = out.src[i];
          if (i - out.expert_offsets[l] >= out.expert_counts[l]) {
            EXPECT_EQ(s.src_rank, -1);
            continue;
          }
          const bool later = s.src_rank > prev_r || (s.src_rank == prev_r && s.src_token > prev_t) ||
                             (s.src_rank == prev_r && s.src_token == prev_t && s.topk_slot > prev_k);
          EXPECT_TRUE(later) << "seed " << seed << " row " << i;
          EXPECT_EQ(p.ranks[s.src_rank].topk_idx[s.src_token * p.topk + s.topk_slot] % p.local_experts(), l);
          prev_r = s.src_rank;
          prev_t = s.src_token;
          prev_k = s.topk_slot;
        }
      }
    }
  }
}

}  // namespace
}  // namespace epc::ref
