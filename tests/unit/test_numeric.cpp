// SPDX-License-Identifier: Apache-2.0
// Bit-exact conversions and fp8 block quantization of the reference model. Expected bit
// patterns are worked out by hand (see the comments) rather than by the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "tests/reference/numeric.hpp"

namespace epc::ref {
namespace {

float from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

uint32_t to_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// ---- bf16 ---------------------------------------------------------------------------------

TEST(Bf16, ExactValues) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-5.0f), 0xC0A0);
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(float_to_bf16(-INFINITY), 0xFF80);
}

TEST(Bf16, RoundToNearestEven) {
  // Exactly halfway: 0x3F80 is even so stays, 0x3F81 is odd so goes up to 0x3F82.
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808000u)), 0x3F80);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F818000u)), 0x3F82);
  EXPECT_EQ(float_to_bf16(from_bits(0xBF818000u)), 0xBF82);
  // Just above / below halfway.
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F817FFFu)), 0x3F81);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F80FFFFu)), 0x3F81);
  // A carry out of the mantissa moves to the next binade: 1.99999988 -> 2.0.
  EXPECT_EQ(float_to_bf16(from_bits(0x3FFFFFFFu)), 0x4000);
  // Float subnormals round like everything else: halfway to 0x0001 is a tie -> 0.
  EXPECT_EQ(float_to_bf16(from_bits(0x00008000u)), 0x0000);
  EXPECT_EQ(float_to_bf16(from_bits(0x00018000u)), 0x0002);
}

TEST(Bf16, OverflowRoundsToInfinity) {
  EXPECT_EQ(float_to_bf16(from_bits(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds up to inf
  EXPECT_EQ(float_to_bf16(from_bits(0x7F7F7FFFu)), 0x7F7F);  // just below the tie
  EXPECT_EQ(float_to_bf16(from_bits(0xFF7FFFFFu)), 0xFF80);
}

TEST(Bf16, NaNBecomesCanonicalQuietNaN) {
  EXPECT_EQ(float_to_bf16(from_bits(0x7FC00000u)), 0x7FFF);
  EXPECT_EQ(float_to_bf16(from_bits(0xFFC00001u)), 0x7FFF);
  // A signalling NaN whose payload lies only in the low 16 bits must not become inf.
  EXPECT_EQ(float_to_bf16(from_bits(0x7F800001u)), 0x7FFF);
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7FFF)));
}

TEST(Bf16, WideningIsExact) {
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xC0A0), -5.0f);
  EXPECT_EQ(bf16_to_float(0x0001), from_bits(0x00010000u));
  EXPECT_TRUE(std::signbit(bf16_to_float(0x8000)));
  EXPECT_EQ(bf16_to_float(0x3F81), 1.0f + 1.0f / 128.0f);
}

TEST(Bf16, EveryNonNaNPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const uint16_t b = static_cast<uint16_t>(bits);
    if ((b & 0x7F80) == 0x7F80 && (b & 0x007F) != 0) continue;  // NaN
    ASSERT_EQ(float_to_bf16(bf16_to_float(b)), b) << std::hex << bits;
  }
}

// ---- fp16 ---------------------------------------------------------------------------------

TEST(Fp16, ExactValues) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_fp16(0.5f), 0x3800);
  EXPECT_EQ(float_to_fp16(448.0f), 0x5F00);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_fp16(0.1f), 0x2E66);  // 0.1 = 0x2E66 (0.0999755859375) in binary16
}

TEST(Fp16, RoundToNearestEven) {
  // 1 + 2^-11 is halfway between 0x3C00 and 0x3C01 -> even 0x3C00;
  // 1 + 3*2^-11 is halfway between 0x3C01 and 0x3C02 -> even 0x3C02.
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(float_to_fp16(1.0f + 3.0f * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(float_to_fp16(from_bits(0x3F801001u)), 0x3C01);  // just above the first tie
}

TEST(Fp16, Overflow) {
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7BFF);  // below the midpoint 65520
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);  // the tie goes to the even pattern: inf
  EXPECT_EQ(float_to_fp16(1e6f), 0x7C00);
  EXPECT_EQ(float_to_fp16(-1e6f), 0xFC00);
  EXPECT_EQ(float_to_fp16(INFINITY), 0x7C00);
  EXPECT_EQ(float_to_fp16(-INFINITY), 0xFC00);
}

TEST(Fp16, Subnormals) {
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16(std::ldexp(1023.0f, -24)), 0x03FF);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 1 -> 0
  EXPECT_EQ(float_to_fp16(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(float_to_fp16(from_bits(0x33000001u)), 0x0001);    // just above 2^-25
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 ulp: tie 1|2 -> 2
  EXPECT_EQ(float_to_fp16(std::ldexp(5.0f, -25)), 0x0002);     // 2.5 ulp: tie 2|3 -> 2
  EXPECT_EQ(float_to_fp16(std::ldexp(2047.0f, -25)), 0x0400);  // tie 0x3FF|0x400 -> 0x400
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -40)), 0x0000);
  EXPECT_EQ(float_to_fp16(from_bits(0x00000001u)), 0x0000);  // float subnormal
}

TEST(Fp16, NaN) {
  EXPECT_EQ(float_to_fp16(NAN), 0x7FFF);
  EXPECT_EQ(float_to_fp16(from_bits(0xFF800001u)), 0x7FFF);
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7C01)));
}

TEST(Fp16, Widening) {
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(fp16_to_float(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(fp16_to_float(0xFC00), -INFINITY);
  EXPECT_EQ(fp16_to_float(0x8000), 0.0f);
  EXPECT_TRUE(std::signbit(fp16_to_float(0x8000)));
  EXPECT_TRUE(std::signbit(fp16_to_float(0x8001)));
  EXPECT_EQ(to_float(Dtype::kFp16, 0x3C00), 1.0f);
  EXPECT_EQ(to_float(Dtype::kBf16, 0x3C00), std::ldexp(1.0f, -7));
}

TEST(Fp16, EveryNonNaNPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    if ((h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0) continue;  // NaN
    ASSERT_EQ(float_to_fp16(fp16_to_float(h)), h) << std::hex << bits;
  }
}

// ---- fp8 e4m3 -----------------------------------------------------------------------------

TEST(E4m3, ExactValues) {
  EXPECT_EQ(float_to_e4m3_satfinite(1.0f), 0x38);  // exponent 7, mantissa 0
  EXPECT_EQ(float_to_e4m3_satfinite(0.5f), 0x30);
  EXPECT_EQ(float_to_e4m3_satfinite(1.5f), 0x3C);
  EXPECT_EQ(float_to_e4m3_satfinite(-1.0f), 0xB8);
  EXPECT_EQ(float_to_e4m3_satfinite(224.0f), 0x76);  // 1.75 * 2^7
  EXPECT_EQ(float_to_e4m3_satfinite(240.0f), 0x77);  // 1.875 * 2^7
  EXPECT_EQ(float_to_e4m3_satfinite(416.0f), 0x7D);  // 1.625 * 2^8
  EXPECT_EQ(float_to_e4m3_satfinite(448.0f), 0x7E);  // 1.75 * 2^8, the largest finite
  EXPECT_EQ(float_to_e4m3_satfinite(-448.0f), 0xFE);
  EXPECT_EQ(float_to_e4m3_satfinite(std::ldexp(1.0f, -6)), 0x08);  // smallest normal
}

TEST(E4m3, Saturates) {
  EXPECT_EQ(float_to_e4m3_satfinite(449.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3_satfinite(464.0f), 0x7E);  // would round to 480 unsaturated
  EXPECT_EQ(float_to_e4m3_satfinite(1e9f), 0x7E);
  EXPECT_EQ(float_to_e4m3_satfinite(-1e9f), 0xFE);
  EXPECT_EQ(float_to_e4m3_satfinite(INFINITY), 0x7E);
  EXPECT_EQ(float_to_e4m3_satfinite(-INFINITY), 0xFE);
}

TEST(E4m3, ZerosAndNaN) {
  EXPECT_EQ(float_to_e4m3_satfinite(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3_satfinite(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3_satfinite(NAN), 0x7F);
  EXPECT_EQ(float_to_e4m3_satfinite(from_bits(0xFFC00000u)), 0x7F);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
}

TEST(E4m3, RoundToNearestEven) {
  // Between 1.0 (m=0) and 1.125 (m=1): 1.0625 is a tie -> even 0x38.
  EXPECT_EQ(float_to_e4m3_satfinite(1.0625f), 0x38);
  // Between 1.125 (m=1) and 1.25 (m=2): 1.1875 is a tie -> even 0x3A.
  EXPECT_EQ(float_to_e4m3_satfinite(1.1875f), 0x3A);
  EXPECT_EQ(float_to_e4m3_satfinite(1.07f), 0x39);
  // 300 = 1.171875 * 256: below the 1.1875 midpoint -> 288 (0x79).
  EXPECT_EQ(float_to_e4m3_satfinite(300.0f), 0x79);
  // Between 416 (0x7D) and 448 (0x7E): 432 is a tie -> even 0x7E; 424 -> 0x7D.
  EXPECT_EQ(float_to_e4m3_satfinite(432.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3_satfinite(424.0f), 0x7D);
}

TEST(E4m3, Subnormals) {
  EXPECT_EQ(float_to_e4m3_satfinite(std::ldexp(1.0f, -9)), 0x01);  // smallest subnormal
  EXPECT_EQ(float_to_e4m3_satfinite(-std::ldexp(1.0f, -9)), 0x81);
  EXPECT_EQ(float_to_e4m3_satfinite(std::ldexp(7.0f, -9)), 0x07);   // largest subnormal
  EXPECT_EQ(float_to_e4m3_satfinite(std::ldexp(1.0f, -10)), 0x00);  // tie 0|1 -> 0
  EXPECT_EQ(float_to_e4m3_satfinite(-std::ldexp(1.0f, -10)), 0x80);
  EXPECT_EQ(float_to_e4m3_satfinite(std::ldexp(3.0f, -11)), 0x01);   // 0.75 ulp -> 1
  EXPECT_EQ(float_to_e4m3_satfinite(std::ldexp(3.0f, -10)), 0x02);   // tie 1|2 -> 2
  EXPECT_EQ(float_to_e4m3_satfinite(std::ldexp(5.0f, -10)), 0x02);   // tie 2|3 -> 2
  EXPECT_EQ(float_to_e4m3_satfinite(std::ldexp(15.0f, -10)), 0x08);  // tie 7|8 -> 8 (normal)
  EXPECT_EQ(float_to_e4m3_satfinite(std::ldexp(1.0f, -20)), 0x00);
}

TEST(E4m3, Decoding) {
  EXPECT_EQ(e4m3_to_float(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x07), std::ldexp(7.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x3C), 1.5f);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_float(0xF6), -224.0f);
}

TEST(E4m3, EveryRepresentableValueRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;  // NaN
    const uint8_t b = static_cast<uint8_t>(code);
    ASSERT_EQ(float_to_e4m3_satfinite(e4m3_to_float(b)), b) << code;
  }
}

// Between every two neighbouring positive codes: the midpoint goes to the even code, and the
// floats just around it go to the nearer one. Values are formed in double, where they are exact.
TEST(E4m3, MidpointsBetweenNeighbours) {
  for (int code = 0; code < 0x7E; ++code) {
    const double low = e4m3_to_float(static_cast<uint8_t>(code));
    const double high = e4m3_to_float(static_cast<uint8_t>(code + 1));
    const float mid = static_cast<float>((low + high) / 2.0);
    const uint8_t even = static_cast<uint8_t>((code % 2 == 0) ? code : code + 1);
    EXPECT_EQ(float_to_e4m3_satfinite(mid), even) << code;
    EXPECT_EQ(float_to_e4m3_satfinite(std::nextafter(mid, 0.0f)), code) << code;
    EXPECT_EQ(float_to_e4m3_satfinite(std::nextafter(mid, 1000.0f)), code + 1) << code;
  }
}

// ---- fp8 block quantization -------------------------------------------------------------

TEST(Ue8m0, RoundsUpToPowerOfTwo) {
  EXPECT_EQ(ue8m0_round_up(0.75f), 1.0f);
  EXPECT_EQ(ue8m0_round_up(1.0f), 1.0f);
  EXPECT_EQ(ue8m0_round_up(1.5f), 2.0f);
  EXPECT_EQ(ue8m0_round_up(3.0f), 4.0f);
  EXPECT_EQ(ue8m0_round_up(from_bits(0x3F800001u)), 2.0f);
  EXPECT_EQ(ue8m0_round_up(std::ldexp(1.0f, -22)), std::ldexp(1.0f, -22));
  EXPECT_EQ(to_bits(ue8m0_round_up(from_bits(0x3EFFFFFFu))), 0x3F000000u);
}

TEST(Fp8Quantize, TwoBlocksByHand) {
  std::vector<float> x(256, 0.0f);
  // Block 0: amax 448 -> scale 448/448 = 1.0, so q = e4m3(x).
  x[0] = 448.0f;
  x[1] = -224.0f;
  x[2] = 1.0f;
  x[3] = 0.5f;
  // Block 1: amax 896 -> scale 2.0, so q = e4m3(x / 2).
  x[128] = 896.0f;
  x[129] = -1.0f;
  x[130] = std::ldexp(1.0f, -8);
  x[131] = 3.0f;
  std::vector<uint8_t> q(256, 0xAA);
  std::vector<float> scales(2, -1.0f);
  quantize_row_fp8(x.data(), 256, false, q.data(), scales.data());
  EXPECT_EQ(scales[0], 1.0f);
  EXPECT_EQ(scales[1], 2.0f);
  EXPECT_EQ(q[0], 0x7E);
  EXPECT_EQ(q[1], 0xF6);
  EXPECT_EQ(q[2], 0x38);
  EXPECT_EQ(q[3], 0x30);
  EXPECT_EQ(q[128], 0x7E);  // 448
  EXPECT_EQ(q[129], 0xB0);  // -0.5
  EXPECT_EQ(q[130], 0x01);  // 2^-9
  EXPECT_EQ(q[131], 0x3C);  // 1.5
  for (int i = 4; i < 128; ++i) EXPECT_EQ(q[i], 0x00) << i;
  for (int i = 132; i < 256; ++i) EXPECT_EQ(q[i], 0x00) << i;
}

TEST(Fp8Quantize, ScaleIsAmaxOver448) {
  std::vector<float> x(128, 0.0f);
  x[5] = 300.0f;
  x[6] = -150.0f;
  std::vector<uint8_t> q(128);
  float scale = 0.0f;
  quantize_row_fp8(x.data(), 128, false, q.data(), &scale);
  EXPECT_EQ(scale, 300.0f / 448.0f);
  EXPECT_EQ(q[5], 0x7E);  // 300 / scale is 448 within an ulp; either way e4m3 gives 448
  EXPECT_EQ(q[6], 0xF6);  // -224 within an ulp
}

TEST(Fp8Quantize, Ue8m0ScaleIsNextPowerOfTwo) {
  std::vector<float> x(128, 0.0f);
  x[5] = 300.0f;   // scale 300/448 = 0.67 -> 1.0, so q = e4m3(x) and 300 -> 288
  x[6] = -150.0f;  // -150 = -1.171875 * 128 -> -144 (0xF1)
  std::vector<uint8_t> q(128);
  float scale = 0.0f;
  quantize_row_fp8(x.data(), 128, true, q.data(), &scale);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(q[5], 0x79);
  EXPECT_EQ(q[6], 0xF1);
}

TEST(Fp8Quantize, TinyAmaxIsClamped) {
  std::vector<float> zeros(128, 0.0f);
  std::vector<uint8_t> q(128, 0xAA);
  float scale = 0.0f;
  quantize_row_fp8(zeros.data(), 128, false, q.data(), &scale);
  EXPECT_EQ(scale, 1e-4f / 448.0f);
  for (uint8_t b : q) EXPECT_EQ(b, 0x00);
  // 1e-4 / 448 = 2.23e-7 lies in (2^-23, 2^-22], so UE8M0 makes it 2^-22.
  quantize_row_fp8(zeros.data(), 128, true, q.data(), &scale);
  EXPECT_EQ(scale, std::ldexp(1.0f, -22));

  std::vector<float> x(128, 0.0f);
  x[0] = 5e-5f;  // below the 1e-4 floor: quantized against 1e-4, i.e. to about 224
  quantize_row_fp8(x.data(), 128, false, q.data(), &scale);
  EXPECT_EQ(scale, 1e-4f / 448.0f);
  EXPECT_EQ(q[0], 0x76);
}

TEST(Fp8Quantize, NaNDoesNotBecomeAmax) {
  std::vector<float> x(128, 0.0f);
  x[0] = NAN;
  x[1] = 448.0f;
  std::vector<uint8_t> q(128);
  float scale = 0.0f;
  quantize_row_fp8(x.data(), 128, false, q.data(), &scale);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(q[0], 0x7F);
  EXPECT_EQ(q[1], 0x7E);
}

TEST(Fp8Quantize, RejectsHiddenNotMultipleOf128) {
  std::vector<float> x(192, 0.0f);
  std::vector<uint8_t> q(192);
  std::vector<float> scales(2);
  EXPECT_THROW(quantize_row_fp8(x.data(), 192, false, q.data(), scales.data()), std::invalid_argument);
  EXPECT_THROW(quantize_row_fp8(x.data(), 0, false, q.data(), scales.data()), std::invalid_argument);
}

// ---- exact accumulation -----------------------------------------------------------------

TEST(AddRoundedProduct, RoundsTheProductFirst) {
  // w = 1 + 762*2^-23, y = 1 + 2^-7: w*y = 1 + 2^-7 + 767.95*2^-23, which rounds to
  // 1 + 2^-7 + 768*2^-23. Adding -1 gives exactly 2^-7 + 3*2^-15; a fused multiply-add would
  // keep the 767.95 and give a different float.
  const float w = from_bits(0x3F8002FAu);
  const float y = 1.0f + std::ldexp(1.0f, -7);
  const float expected = std::ldexp(1.0f, -7) + 3.0f * std::ldexp(1.0f, -15);
  EXPECT_EQ(add_rounded_product(-1.0f, w, y), expected);
  EXPECT_NE(std::fma(w, y, -1.0f), expected);
}

}  // namespace
}  // namespace epc::ref
