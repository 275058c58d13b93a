// SPDX-License-Identifier: Apache-2.0
// HT passthrough in the reference model (EPC_QUANT_PASSTHROUGH): e4m3 and e2m1 rows with any
// scale count and scale dtype copied byte for byte, in the flat and the expert-packed
// layouts, on the hand-worked routing; the format sizes and their refusals.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "tests/reference/reference.hpp"
#include "tests/reference/reference_ht_packed.hpp"
#include "tests/unit/reference_hand_case.hpp"

namespace epc::ref {
namespace {

using hand_case::format;
using hand_case::hand_problem;
using hand_case::passthrough_problem;
using hand_case::row_byte;
using hand_case::scale_byte;

TEST(HtPassthrough, FormatSizesByHand) {
  EXPECT_EQ(passthrough_row_bytes(7168, format(QuantPayload::kE4m3, ScaleDtype::kFp32, 56)), 7168);
  EXPECT_EQ(passthrough_row_bytes(7168, format(QuantPayload::kE2m1, ScaleDtype::kFp32, 56)), 3584);
  // MXFP8: one e8m0 per 32 channels; packed four to a word: 56 words for 7168 channels.
  EXPECT_EQ(passthrough_scale_bytes(format(QuantPayload::kE4m3, ScaleDtype::kE8m0, 224)), 224);
  EXPECT_EQ(passthrough_scale_bytes(format(QuantPayload::kE4m3, ScaleDtype::kE8m0x4, 56)), 224);
  // NVFP4's e4m3 block scales travel as uint8: one per 16 channels.
  EXPECT_EQ(passthrough_scale_bytes(format(QuantPayload::kE2m1, ScaleDtype::kUint8, 448)), 448);
  EXPECT_EQ(passthrough_scale_bytes(format(QuantPayload::kE4m3, ScaleDtype::kBf16, 3)), 6);
  EXPECT_EQ(passthrough_scale_bytes(format(QuantPayload::kE4m3, ScaleDtype::kFp32, 1)), 4);
}

TEST(HtPassthrough, RefusesFormatsTheRowsCannotHold) {
  EXPECT_THROW(passthrough_row_bytes(8, format(QuantPayload::kE4m3, ScaleDtype::kFp32, 1)), std::invalid_argument);
  EXPECT_THROW(passthrough_row_bytes(48, format(QuantPayload::kE2m1, ScaleDtype::kFp32, 1)), std::invalid_argument);
  EXPECT_THROW(passthrough_scale_bytes(format(QuantPayload::kE4m3, ScaleDtype::kFp32, 0)), std::invalid_argument);
  HtDispatchOptions o;
  o.payload = HtPayload::kPassthrough;
  o.passthrough = format(QuantPayload::kE2m1, ScaleDtype::kBf16, 3);
  Problem p = passthrough_problem(16, 6);
  p.ranks[1].x_scale_bytes.pop_back();
  EXPECT_THROW(ht_dispatch(p, o), std::invalid_argument);
  p = passthrough_problem(15, 6);
  EXPECT_THROW(ht_dispatch(p, o), std::invalid_argument);
}

// Flat: rank 0 receives (0,0) (0,2) (1,0) (1,1), rank 1 (0,0) (0,1) (1,0).
TEST(HtPassthrough, FlatE2m1WithThreeBf16ScalesByHand) {
  HtDispatchOptions o;
  o.payload = HtPayload::kPassthrough;
  o.passthrough = format(QuantPayload::kE2m1, ScaleDtype::kBf16, 3);
  const auto results = ht_dispatch(passthrough_problem(16, 6), o);
  ASSERT_EQ(results.size(), 2u);
  const int src[2][4][2] = {{{0, 0}, {0, 2}, {1, 0}, {1, 1}}, {{0, 0}, {0, 1}, {1, 0}, {-1, -1}}};
  for (int q = 0; q < 2; ++q) {
    const HtDispatchResult& out = results[q];
    const int n = q == 0 ? 4 : 3;
    ASSERT_EQ(out.num_recv, n);
    ASSERT_EQ(out.x_quant.size(), static_cast<size_t>(n) * 16);
    ASSERT_EQ(out.x_scale_bytes.size(), static_cast<size_t>(n) * 6);
    EXPECT_TRUE(out.x.empty() && out.x_fp8.empty() && out.fp8_scales.empty());
    for (int i = 0; i < n; ++i) {
      const int r = src[q][i][0], t = src[q][i][1];
      for (int b = 0; b < 16; ++b) EXPECT_EQ(out.x_quant[i * 16 + b], row_byte(r, t, b)) << q << " " << i;
      for (int s = 0; s < 6; ++s) EXPECT_EQ(out.x_scale_bytes[i * 6 + s], scale_byte(r, t, s)) << q << " " << i;
    }
  }
  // Literally: rank 0's row 1 is token (0, 2): byte 5 is 0x45, scale byte 2 is 0x52.
  EXPECT_EQ(results[0].x_quant[16 + 5], 0x45);
  EXPECT_EQ(results[0].x_scale_bytes[6 + 2], 0x52);
  // The routing columns are those of any other payload.
  EXPECT_EQ(results[0].recv_topk_idx, ht_dispatch(hand_problem()).front().recv_topk_idx);
}

TEST(HtPassthrough, FlatE4m3WithPackedE8m0KeepsEveryBit) {
  HtDispatchOptions o;
  o.payload = HtPayload::kPassthrough;
  o.passthrough = format(QuantPayload::kE4m3, ScaleDtype::kE8m0x4, 2);
  Problem p = passthrough_problem(32, 8);
  // Exponent bytes at both ends (0x00: 2^-127, 0xFF: NaN) are bits, not values.
  p.ranks[1].x_scale_bytes[0] = 0x00;
  p.ranks[1].x_scale_bytes[7] = 0xFF;
  const auto results = ht_dispatch(p, o);
  ASSERT_EQ(results[1].x_quant.size(), 3u * 32);
  // Rank 1's row 2 is token (1, 0).
  EXPECT_EQ(results[1].x_scale_bytes[2 * 8 + 0], 0x00);
  EXPECT_EQ(results[1].x_scale_bytes[2 * 8 + 7], 0xFF);
  EXPECT_EQ(results[1].x_scale_bytes[2 * 8 + 3], scale_byte(1, 0, 3));
  EXPECT_EQ(results[1].x_quant[2 * 32 + 31], row_byte(1, 0, 31));
}

// Packed at alignment 4, rank 0: expert 0 <- (0,2,0) (1,0,1), two padding rows, expert 1 <-
// (0,0,0) (0,2,1) (1,1,0) (1,1,1).
TEST(HtPassthrough, PackedE2m1WithFiveUint8ScalesByHand) {
  HtPackedOptions o;
  o.payload = HtPayload::kPassthrough;
  o.alignment = 4;
  o.passthrough = format(QuantPayload::kE2m1, ScaleDtype::kUint8, 5);
  const auto results = ht_dispatch_packed(passthrough_problem(16, 5), o);
  const HtPackedResult& r0 = results[0];
  ASSERT_EQ(r0.row_bytes, 16);
  ASSERT_EQ(r0.scale_bytes, 5);
  ASSERT_EQ(r0.rows, 8);
  const int src[8][2] = {{0, 2}, {1, 0}, {-1, -1}, {-1, -1}, {0, 0}, {0, 2}, {1, 1}, {1, 1}};
  for (int i = 0; i < 8; ++i) {
    const int r = src[i][0], t = src[i][1];
    for (int b = 0; b < 16; ++b) EXPECT_EQ(r0.payload[i * 16 + b], r < 0 ? 0 : row_byte(r, t, b)) << i;
    for (int s = 0; s < 5; ++s) EXPECT_EQ(r0.scales[i * 5 + s], r < 0 ? 0 : scale_byte(r, t, s)) << i;
  }
  EXPECT_EQ(r0.scales[5 * 5 + 4], 0x54);  // row 5: token (0, 2), scale byte 4
}

}  // namespace
}  // namespace epc::ref
