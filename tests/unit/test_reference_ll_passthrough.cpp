// SPDX-License-Identifier: Apache-2.0
// LL passthrough in the reference model (EPC_QUANT_PASSTHROUGH on low-latency groups): the
// caller's e4m3 or e2m1 rows and scales of any dtype copied byte for byte into every row a
// token feeds, in the expert-padded and the token layouts, on the hand-worked routing.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "tests/reference/reference.hpp"
#include "tests/reference/reference_ll_tokens.hpp"
#include "tests/unit/reference_hand_case.hpp"

namespace epc::ref {
namespace {

using hand_case::format;
using hand_case::hand_problem;
using hand_case::passthrough_problem;
using hand_case::row_byte;
using hand_case::scale_byte;

struct Source {
  int r;
  int t;
};

LlDispatchOptions padded_options(const PassthroughFormat& f) {
  LlDispatchOptions o;
  o.passthrough = true;
  o.format = f;
  return o;
}

LlTokenOptions token_options(LlTokenLayout layout, const PassthroughFormat& f) {
  LlTokenOptions o;
  o.layout = layout;
  o.passthrough = true;
  o.format = f;
  return o;
}

// Expects `rows` of `row_bytes` and `scale_bytes` each to hold the bytes of the named source
// tokens ({-1, -1}: an unwritten, zero row).
void expect_rows(const std::vector<uint8_t>& x, const std::vector<uint8_t>& scales, int row_bytes, int scale_bytes,
                 const std::vector<Source>& sources) {
  for (size_t i = 0; i < sources.size(); ++i) {
    const Source s = sources[i];
    for (int b = 0; b < row_bytes; ++b) {
      EXPECT_EQ(x[i * row_bytes + b], s.r < 0 ? 0 : row_byte(s.r, s.t, b)) << "row " << i << " byte " << b;
    }
    for (int b = 0; b < scale_bytes; ++b) {
      EXPECT_EQ(scales[i * scale_bytes + b], s.r < 0 ? 0 : scale_byte(s.r, s.t, b)) << "row " << i << " scale " << b;
    }
  }
}

// Expert-padded, R*T = 6 rows per expert. Rank 0: expert 0 <- (0,2,0) (1,0,1); expert 1 <-
// (0,0,0) (0,2,1) (1,1,0) (1,1,1) (token (1,1) names expert 1 twice: two rows). Rank 1:
// expert 2 <- (0,0,1) (1,0,0); expert 3 <- (0,1,0).
TEST(LlPassthrough, ExpertPaddedE4m3WithTwoFp32ScalesByHand) {
  const auto results =
      ll_dispatch(passthrough_problem(32, 8), padded_options(format(QuantPayload::kE4m3, ScaleDtype::kFp32, 2)));
  ASSERT_EQ(results.size(), 2u);
  const Source none{-1, -1};
  const std::vector<Source> rank0 = {{0, 2}, {1, 0}, none,   none,   none, none,   // expert 0
                                     {0, 0}, {0, 2}, {1, 1}, {1, 1}, none, none};  // expert 1
  const std::vector<Source> rank1 = {{0, 0}, {1, 0}, none, none, none, none,       // expert 2
                                     {0, 1}, none,   none, none, none, none};      // expert 3
  for (int q = 0; q < 2; ++q) {
    const LlDispatchResult& out = results[q];
    EXPECT_TRUE(out.x.empty() && out.x_fp8.empty() && out.fp8_scales.empty());
    ASSERT_EQ(out.x_quant.size(), 12u * 32);
    ASSERT_EQ(out.x_scale_bytes.size(), 12u * 8);
    expect_rows(out.x_quant, out.x_scale_bytes, 32, 8, q == 0 ? rank0 : rank1);
  }
  EXPECT_EQ(results[0].counts, (std::vector<int32_t>{2, 4}));
  // Literally: rank 0's expert 1 row 2 is token (1, 1): byte 0 is 0xA0, scale byte 7 0x6F.
  EXPECT_EQ(results[0].x_quant[(6 + 2) * 32], 0xA0);
  EXPECT_EQ(results[0].x_scale_bytes[(6 + 2) * 8 + 7], 0x6F);
  // Rows, counts and sources are those of the 16-bit dispatch of the same routing.
  const auto plain = ll_dispatch(hand_problem());
  for (int q = 0; q < 2; ++q) {
    EXPECT_EQ(results[q].counts, plain[q].counts);
    for (size_t i = 0; i < plain[q].src.size(); ++i) EXPECT_EQ(results[q].src[i].src_token, plain[q].src[i].src_token);
  }
}

// Packed UE8M0 words are bits like any other: exponent bytes 0x00 and 0xFF arrive as given.
TEST(LlPassthrough, ExpertPaddedE8m0x4KeepsEveryBit) {
  Problem p = passthrough_problem(32, 8);
  p.ranks[1].x_scale_bytes[0] = 0x00;  // token (1, 0)
  p.ranks[1].x_scale_bytes[7] = 0xFF;
  const auto results = ll_dispatch(p, padded_options(format(QuantPayload::kE4m3, ScaleDtype::kE8m0x4, 2)));
  // Token (1, 0) is rank 0's expert 0 row 1 and rank 1's expert 2 row 1: index 1 on both.
  for (int q = 0; q < 2; ++q) {
    EXPECT_EQ(results[q].x_scale_bytes[8 + 0], 0x00) << q;
    EXPECT_EQ(results[q].x_scale_bytes[8 + 7], 0xFF) << q;
    EXPECT_EQ(results[q].x_scale_bytes[8 + 3], scale_byte(1, 0, 3)) << q;
  }
}

// FLAT: rank 0 receives (0,0) (0,2) (1,0) (1,1), rank 1 (0,0) (0,1) (1,0); e2m1 rows of 16
// bytes (hidden 32) with three bf16 scales.
TEST(LlPassthrough, FlatE2m1WithThreeBf16ScalesByHand) {
  const auto results =
      ll_dispatch_tokens(passthrough_problem(16, 6),
                         token_options(LlTokenLayout::kFlat, format(QuantPayload::kE2m1, ScaleDtype::kBf16, 3)));
  const Source none{-1, -1};
  expect_rows(results[0].x_quant, results[0].x_scale_bytes, 16, 6, {{0, 0}, {0, 2}, {1, 0}, {1, 1}, none, none});
  expect_rows(results[1].x_quant, results[1].x_scale_bytes, 16, 6, {{0, 0}, {0, 1}, {1, 0}, none, none, none});
  EXPECT_TRUE(results[0].x.empty());
  EXPECT_EQ(results[0].num_recv, 4);
  // Literally: rank 1's row 1 is token (0, 1): byte 3 is 0x23, scale byte 5 is 0x4D.
  EXPECT_EQ(results[1].x_quant[16 + 3], 0x23);
  EXPECT_EQ(results[1].x_scale_bytes[6 + 5], 0x4D);
  // The routing columns are those of the 16-bit dispatch.
  LlTokenOptions plain;
  plain.layout = LlTokenLayout::kFlat;
  EXPECT_EQ(results[0].recv_topk_idx, ll_dispatch_tokens(hand_problem(), plain)[0].recv_topk_idx);
}

// RANK_MAJOR: rank 0 holds (0,0) (0,2) in zone 0 and (1,0) (1,1) in zone 1 (rows 3, 4).
TEST(LlPassthrough, RankMajorE4m3WithOneUint8ScaleByHand) {
  const auto results =
      ll_dispatch_tokens(passthrough_problem(32, 1),
                         token_options(LlTokenLayout::kRankMajor, format(QuantPayload::kE4m3, ScaleDtype::kUint8, 1)));
  const Source none{-1, -1};
  expect_rows(results[0].x_quant, results[0].x_scale_bytes, 32, 1, {{0, 0}, {0, 2}, none, {1, 0}, {1, 1}, none});
  expect_rows(results[1].x_quant, results[1].x_scale_bytes, 32, 1, {{0, 0}, {0, 1}, none, {1, 0}, none, none});
  EXPECT_EQ(results[0].x_scale_bytes[4], 0x68);  // token (1, 1), its only scale byte
}

TEST(LlPassthrough, RefusesPayloadsThatDoNotMatchTheFormat) {
  const PassthroughFormat f = format(QuantPayload::kE4m3, ScaleDtype::kFp32, 2);
  Problem p = passthrough_problem(32, 8);
  p.ranks[0].x_scale_bytes.pop_back();
  EXPECT_THROW(ll_dispatch(p, padded_options(f)), std::invalid_argument);
  EXPECT_THROW(ll_dispatch_tokens(p, token_options(LlTokenLayout::kFlat, f)), std::invalid_argument);
  p = passthrough_problem(32, 8);
  LlDispatchOptions both = padded_options(f);
  both.use_fp8 = true;
  EXPECT_THROW(ll_dispatch(p, both), std::invalid_argument);
  LlTokenOptions both_tokens = token_options(LlTokenLayout::kRankMajor, f);
  both_tokens.use_fp8 = true;
  EXPECT_THROW(ll_dispatch_tokens(p, both_tokens), std::invalid_argument);
  // e2m1 rows need hidden to be a multiple of 32.
  p = passthrough_problem(12, 8);
  p.hidden = 24;
  EXPECT_THROW(ll_dispatch(p, padded_options(format(QuantPayload::kE2m1, ScaleDtype::kFp32, 2))),
               std::invalid_argument);
}

}  // namespace
}  // namespace epc::ref
