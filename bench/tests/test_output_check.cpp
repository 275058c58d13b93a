// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "bench/output_check.hpp"

namespace epc::bench {
namespace {

TEST(OutputCheck, Bf16Rounding) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3F80);  // a tie rounds to even
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3F82);  // a tie rounds to even (up)
  EXPECT_EQ(bf16_to_float(float_to_bf16(0.375f)), 0.375f);
}

TEST(OutputCheck, ExpectedCombine) {
  // Top-4 over 2 ranks of 4 experts each. Token 0: three entries on rank 0, one on rank 1.
  // Token 1: every entry masked. Token 2: two entries on rank 1, two masked.
  const Routing r = {0, 1, 2, 5, -1, -1, -1, -1, 6, -1, 7, -1};
  const std::vector<float> ours = expected_combine(r, 3, 4, 4, 2, true);
  EXPECT_EQ(ours, (std::vector<float>{1.0f, 0.0f, 0.5f}));
  EXPECT_EQ(expected_combine(r, 3, 4, 4, 2, false), ours);
}

TEST(OutputCheck, ExpectedHighThroughputCombineCountsReceivingRanks) {
  // Same routing as above: token 0 on ranks 0 and 1, token 1 nowhere, token 2 on rank 1 twice.
  const Routing r = {0, 1, 2, 5, -1, -1, -1, -1, 6, -1, 7, -1};
  EXPECT_EQ(expected_ht_combine(r, 3, 4, 4, 2), (std::vector<float>{2.0f, 0.0f, 1.0f}));
}

TEST(OutputCheck, PerRankPartialsRoundSeparately) {
  // Top-3: weights of 1/3. Rank 0 holds two entries (2/3 rounds to bf16 0.66796875), rank 1
  // one (1/3 rounds to 0.333984375); their sum rounds to 1.0 either way here, so compare
  // with the per-rank sum computed by hand.
  const Routing r = {0, 1, 4};
  const float two_thirds = bf16_to_float(float_to_bf16(2.0f / 3.0f));
  const float one_third = bf16_to_float(float_to_bf16(1.0f / 3.0f));
  const std::vector<float> ours = expected_combine(r, 1, 3, 4, 2, true);
  EXPECT_EQ(ours[0], bf16_to_float(float_to_bf16(two_thirds + one_third)));
}

TEST(OutputCheck, CheckCombinedFindsAWrongChannel) {
  std::vector<uint16_t> out(2 * 8, float_to_bf16(0.5f));
  std::string error;
  EXPECT_TRUE(check_combined(out, 2, 8, {0.5f, 0.5f}, error)) << error;
  out[8 + 3] = float_to_bf16(0.25f);
  EXPECT_FALSE(check_combined(out, 2, 8, {0.5f, 0.5f}, error));
  EXPECT_NE(error.find("token 1, channel 3"), std::string::npos) << error;
  // One bf16 step of tolerance, not more.
  std::vector<uint16_t> near(8, static_cast<uint16_t>(float_to_bf16(0.5f) + 1));
  EXPECT_TRUE(check_combined(near, 1, 8, {0.5f}, error)) << error;
  std::vector<uint16_t> far(8, static_cast<uint16_t>(float_to_bf16(0.5f) + 3));
  EXPECT_FALSE(check_combined(far, 1, 8, {0.5f}, error));
  std::vector<uint16_t> nonzero(8, float_to_bf16(1e-3f));
  EXPECT_FALSE(check_combined(nonzero, 1, 8, {0.0f}, error));
}

TEST(OutputCheck, Counts) {
  std::string error;
  EXPECT_TRUE(check_counts({1, 2}, {1, 2}, error));
  EXPECT_FALSE(check_counts({1, 3}, {1, 2}, error));
  EXPECT_NE(error.find("local expert 1"), std::string::npos) << error;
  EXPECT_FALSE(check_counts({1}, {1, 2}, error));
}

TEST(OutputCheck, LlRowSourcesFollowTheReferenceLayouts) {
  // Two ranks of two experts, top-2. Rank 0: t0 -> [1, 2], t1 -> [3, -1]; rank 1: t0 -> [0, 1],
  // t1 -> [-1, -1]. T = 2.
  const std::vector<Routing> all = {{1, 2, 3, -1}, {0, 1, -1, -1}};
  std::vector<RowSource> rows;
  std::string error;
  // Rank 0, expert-padded [2, 4]: expert 0 <- (1, 0); expert 1 <- (0, 0), (1, 0).
  ASSERT_TRUE(ll_row_sources(all, 0, 2, 2, 4, 2, LlRows::kExpertPadded, rows, error)) << error;
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_EQ(rows[0].rank, 1);
  EXPECT_EQ(rows[0].token, 0);
  EXPECT_EQ(rows[1].rank, -1);
  EXPECT_EQ(rows[4].rank, 0);
  EXPECT_EQ(rows[5].rank, 1);
  // Rank 1, rank-major [2, 2]: zone 0 <- (0, 0), (0, 1); zone 1 empty.
  ASSERT_TRUE(ll_row_sources(all, 1, 2, 2, 4, 2, LlRows::kRankMajor, rows, error)) << error;
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[1].rank, 0);
  EXPECT_EQ(rows[1].token, 1);
  EXPECT_EQ(rows[2].rank, -1);
  // Rank 0, flat: (0, 0), (1, 0).
  ASSERT_TRUE(ll_row_sources(all, 0, 2, 2, 4, 2, LlRows::kFlat, rows, error)) << error;
  EXPECT_EQ(rows[1].rank, 1);
  EXPECT_EQ(rows[2].rank, -1);
}

TEST(OutputCheck, PassthroughRowsMustHoldTheirSourcesBytes) {
  const std::vector<RowSource> sources = {{0, 1}, {-1, -1}, {1, 0}};
  std::vector<uint8_t> x(3 * 4, 0xEE), scales(3 * 2, 0xEE);
  for (int i : {0, 2}) {
    for (int b = 0; b < 4; ++b) x[i * 4 + b] = passthrough_row_byte(sources[i].rank, sources[i].token, b);
    for (int b = 0; b < 2; ++b) scales[i * 2 + b] = passthrough_scale_byte(sources[i].rank, sources[i].token, b);
  }
  std::string error;
  EXPECT_TRUE(check_passthrough_rows(sources, x, 4, scales, 2, error)) << error;
  // Distinct tokens fill distinct bytes.
  EXPECT_NE(passthrough_row_byte(0, 1, 0), passthrough_row_byte(1, 0, 0));
  scales[2 * 2 + 1] ^= 1;
  EXPECT_FALSE(check_passthrough_rows(sources, x, 4, scales, 2, error));
  EXPECT_NE(error.find("out_scales of row 2 byte 1"), std::string::npos) << error;
  scales[2 * 2 + 1] ^= 1;
  x[3] ^= 0x80;
  EXPECT_FALSE(check_passthrough_rows(sources, x, 4, scales, 2, error));
  EXPECT_NE(error.find("out_x row 0 byte 3"), std::string::npos) << error;
}

}  // namespace
}  // namespace epc::bench
