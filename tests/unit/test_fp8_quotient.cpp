// SPDX-License-Identifier: Apache-2.0
// The LL fp8 cast divides without a division (kernels/wire/fp8_quotient.hpp): proven here
// equal to the reference's IEEE division for every input the cast can meet. Its inputs are
// bf16 or fp16 values, and every scale comes from an amax that is one of them, so the test
// walks every (scale, value) pair: all positive finite values as the amax (each distinct
// scale once), all values of magnitude up to that amax and their negatives (signed zeros
// included), with and without UE8M0 rounding. A UE8M0-rounded scale's divisor takes the
// plain product (its reciprocal exact): equal to the division at every pair, tiny ones included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/wire/fp8_quotient.hpp"
#include "tests/reference/numeric.hpp"

namespace epc {
namespace {

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// The non-negative finite values of a 16-bit format in increasing order (bit order is value
// order for non-negative values).
std::vector<float> non_negative_values(ref::Dtype dtype) {
  std::vector<float> values;
  for (uint32_t bits = 0; bits < 0x8000u; ++bits) {
    const float v = ref::to_float(dtype, static_cast<uint16_t>(bits));
    if (!std::isfinite(v)) break;
    values.push_back(v);
  }
  return values;
}

constexpr float kSmallestNormal = 0x1p-126f;
// Below this the remainder x - q * scale (about 2^-24 of x) underflows and is not exact.
constexpr float kExactRemainder = 0x1p-102f;

struct Mismatch {
  int count = 0;
  float scale = 0, value = 0;
};

// Every value of `values` up to and including index `last`, and its negative, under `scale`:
// the float quotient must equal the division's wherever the quotient is a normal float and x
// is large enough for the remainder to be exact, and the e4m3 byte always (smaller values
// are far below any step of e4m3 under any scale: their quotients are at most about 2^-102 /
// 2^-22, and convert to the division's signed zero). A power-of-two scale (`ue8m0`) must give
// the division's float everywhere.
void check_scale(const std::vector<float>& values, size_t last, float scale, bool ue8m0, Mismatch* m) {
  const kernels::Fp8Divisor divisor = kernels::fp8_divisor(scale, ue8m0);
  for (size_t i = 0; i <= last; ++i) {
    for (const float x : {values[i], -values[i]}) {
      const float fast = kernels::fp8_quotient(x, divisor), exact = x / scale;
      if (bits_of(fast) == bits_of(exact)) continue;
      const bool normal = std::fabs(x) >= kExactRemainder && std::fabs(exact) >= kSmallestNormal;
      if (ue8m0 || normal || ref::float_to_e4m3_satfinite(fast) != ref::float_to_e4m3_satfinite(exact)) {
        if (m->count++ == 0) {
          m->scale = scale;
          m->value = x;
        }
      }
    }
  }
}

void check_every_pair(ref::Dtype dtype, bool ue8m0) {
  const std::vector<float> values = non_negative_values(dtype);
  ASSERT_GT(values.size(), 30000u);
  Mismatch m;
  float previous_scale = -1;
  // Amaxes in increasing order give non-decreasing scales: a scale is checked once, with
  // the values up to the largest amax that gives it.
  for (size_t a = 0; a < values.size(); ++a) {
    const float scale = ref::fp8_block_scale(values[a], ue8m0);
    const bool last_of_scale = a + 1 == values.size() || ref::fp8_block_scale(values[a + 1], ue8m0) != scale;
    ASSERT_GE(scale, previous_scale);
    previous_scale = scale;
    if (last_of_scale) check_scale(values, a, scale, ue8m0, &m);
  }
  EXPECT_EQ(m.count, 0) << "first mismatch: " << m.value << " / " << m.scale;
}

TEST(Fp8Quotient, EqualsTheDivisionForEveryBf16Pair) { check_every_pair(ref::Dtype::kBf16, false); }
TEST(Fp8Quotient, EqualsTheDivisionForEveryFp16Pair) { check_every_pair(ref::Dtype::kFp16, false); }
TEST(Fp8Quotient, EqualsTheDivisionForEveryUe8m0Pair) {
  check_every_pair(ref::Dtype::kBf16, true);
  check_every_pair(ref::Dtype::kFp16, true);
}

// The block scale's own division by 448, for every amax a 16-bit input can give (and one
// past the largest finite bf16, which rounds the same way), and an infinite amax.
TEST(Fp8Quotient, BlockScaleEqualsTheDivisionForEveryAmax) {
  int mismatches = 0;
  for (ref::Dtype dtype : {ref::Dtype::kBf16, ref::Dtype::kFp16}) {
    for (float amax : non_negative_values(dtype)) {
      const float clamped = amax > 1e-4f ? amax : 1e-4f;
      mismatches += bits_of(kernels::fp8_unrounded_scale(amax)) != bits_of(clamped / 448.0f);
      mismatches += bits_of(kernels::fp8_unrounded_scale(amax)) != bits_of(ref::fp8_block_scale(amax, false));
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(kernels::fp8_unrounded_scale(INFINITY), INFINITY);
}

// A signed zero keeps its sign (e4m3 0x80 for -0, as the division gives): the correction's
// remainder of a zero quotient is +0, and adding it to -0 would give +0.
TEST(Fp8Quotient, NegativeZeroStaysNegative) {
  for (float scale : {0x1p-40f, 1e-4f / 448.0f, 1.0f / 448.0f, 0.5f, 3.0f, 146.0f, 0x1p-22f, 0x1p7f}) {
    int exponent = 0;
    const bool power_of_two = std::frexp(scale, &exponent) == 0.5f;
    for (bool exact : {false, power_of_two}) {
      const kernels::Fp8Divisor divisor = kernels::fp8_divisor(scale, exact);
      EXPECT_EQ(bits_of(kernels::fp8_quotient(-0.0f, divisor)), bits_of(-0.0f)) << scale;
      EXPECT_EQ(bits_of(kernels::fp8_quotient(0.0f, divisor)), bits_of(0.0f)) << scale;
      EXPECT_EQ(ref::float_to_e4m3_satfinite(kernels::fp8_quotient(-0.0f, divisor)), 0x80) << scale;
    }
  }
}

// An infinite scale (an infinite amax), rounded or not: the quotient is what the division
// gives, signed zeros for finite values and NaN for infinite ones.
TEST(Fp8Quotient, InfiniteScaleGivesTheDivisionsQuotient) {
  for (bool power_of_two : {false, true}) {
    const kernels::Fp8Divisor divisor = kernels::fp8_divisor(INFINITY, power_of_two);
    EXPECT_FALSE(divisor.finite);
    EXPECT_EQ(bits_of(divisor.reciprocal), bits_of(0.0f));
    for (float x : {0.0f, -0.0f, 3.0f, -3.0f, 1e-40f, -65504.0f, 3.38e38f}) {
      EXPECT_EQ(bits_of(kernels::fp8_quotient(x, divisor)), bits_of(x / INFINITY)) << x;
    }
    EXPECT_TRUE(std::isnan(kernels::fp8_quotient(INFINITY, divisor)));
    EXPECT_TRUE(std::isnan(kernels::fp8_quotient(-INFINITY, divisor)));
    EXPECT_TRUE(std::isnan(kernels::fp8_quotient(NAN, divisor)));
  }
}

// A power of two's reciprocal from its exponent bits is 1 / scale, at every power of two in
// the divisor's range (2^-126 to 2^126), and exact: scale times it is 1.
TEST(Fp8Quotient, PowerOfTwoReciprocalIsExact) {
  for (int e = -126; e <= 126; ++e) {
    const float scale = std::ldexp(1.0f, e);
    const kernels::Fp8Divisor divisor = kernels::fp8_divisor(scale, true);
    EXPECT_TRUE(divisor.exact);
    EXPECT_EQ(bits_of(divisor.reciprocal), bits_of(1.0f / scale)) << e;
    EXPECT_EQ(divisor.reciprocal, std::ldexp(1.0f, -e)) << e;
    EXPECT_EQ(scale * divisor.reciprocal, 1.0f) << e;
  }
}

// The correction matters: the plain product x * (1 / scale) differs from the division for
// some pair the cast meets (else the test above would prove nothing about it).
TEST(Fp8Quotient, ThePlainProductWouldDiffer) {
  const std::vector<float> values = non_negative_values(ref::Dtype::kBf16);
  int differ = 0;
  for (size_t a = 0; a < values.size() && differ == 0; a += 97) {
    const float scale = ref::fp8_block_scale(values[a], false);
    const float reciprocal = 1.0f / scale;
    for (size_t i = 0; i <= a; ++i) differ += bits_of(values[i] * reciprocal) != bits_of(values[i] / scale);
  }
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace epc
