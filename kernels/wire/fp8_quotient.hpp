// SPDX-License-Identifier: Apache-2.0
// The fp8 cast's x / scale without a division per value. Every value of a 128-channel block
// is divided by the same scale, so the block takes one correctly rounded reciprocal r and
// each value one product and two fused corrections (Markstein's): q = x * r rounded; the
// remainder x - q * scale is exact in one FMA; q + remainder * r rounds to exactly the
// IEEE quotient x / scale whenever that quotient is a normal float and x is at least 2^-102
// (so that the remainder does not underflow). Below that both are far under e4m3's smallest
// step and convert to the same signed zero. The remainder is taken negated, q * scale - x,
// and subtracted: the same values, but when q is a zero (x is, or x * r underflows) the
// sums that are exactly zero come out with the quotient's sign. As x - q * scale, the
// remainder of x = -0 would be +0, and -0 + +0 is +0 where the division gives -0.
// A power-of-two scale (UE8M0 rounding) needs no correction: its reciprocal is exact, so the
// product alone is the correctly rounded quotient, and the reciprocal is a subtraction on the
// exponent bits rather than a correctly rounded reciprocal.
// tests/unit/test_fp8_quotient.cpp checks this against the division for every bf16 and
// fp16 value under every scale the cast can produce, and the block scale's own division by
// 448 for every amax, and an infinite scale (an infinite amax) against the division too.
// Host and device compile the same operations (kernels/device/fp8.cuh casts with it).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/wire/limits.hpp"

#ifdef __CUDACC__
#define EPC_FP8_QUOTIENT_FN __host__ __device__ inline
#else
#define EPC_FP8_QUOTIENT_FN inline
#endif

namespace epc::kernels {

// 254 << 23: a normal power of two's exponent field subtracted from it is its reciprocal's.
constexpr uint32_t kFp8ReciprocalExponents = 0x7F000000u;

// A scale and its correctly rounded reciprocal; `finite` false for an infinite scale, whose
// correction would make 0 * inf (its reciprocal is 0); `exact` when the reciprocal is exactly
// 1 / scale (a power-of-two or infinite scale), so that the product alone is the quotient.
struct Fp8Divisor {
  float scale;
  float reciprocal;
  bool finite;
  bool exact;
};

EPC_FP8_QUOTIENT_FN float fp8_mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);  // never contracted into a neighbouring FMA
#else
  return a * b;
#endif
}

EPC_FP8_QUOTIENT_FN float fp8_fma_rn(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// `value`'s bits as a To of the same size (a register move on the device).
template <typename To, typename From>
EPC_FP8_QUOTIENT_FN To fp8_bit_cast(From value) {
  static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the size");
  To to;
  memcpy(&to, &value, sizeof to);
  return to;
}

// The divisor of any positive scale (`power_of_two` false), or of a power of two from 2^-126
// to 2^126 or infinity (true: a UE8M0-rounded scale, at most 2^120 from a finite 16-bit amax),
// whose reciprocal's exponent field is 254 minus the scale's (0 for infinity).
EPC_FP8_QUOTIENT_FN Fp8Divisor fp8_divisor(float scale, bool power_of_two) {
  const bool finite = scale <= FLT_MAX;
  if (power_of_two) {
    const float reciprocal =
        finite ? fp8_bit_cast<float>(kFp8ReciprocalExponents - fp8_bit_cast<uint32_t>(scale)) : 0.0f;
    return Fp8Divisor{scale, reciprocal, finite, true};
  }
#ifdef __CUDA_ARCH__
  const float reciprocal = __frcp_rn(scale);
#else
  const float reciprocal = 1.0f / scale;
#endif
  return Fp8Divisor{scale, reciprocal, finite, false};
}

// x / d.scale, rounded to nearest even (exactly so for normal quotients; see above). Under an
// infinite scale the reciprocal is 0 and the uncorrected product x * 0 is the quotient
// (signed zero for finite x, NaN for infinite or NaN x), chosen without a branch.
EPC_FP8_QUOTIENT_FN float fp8_quotient(float x, Fp8Divisor d) {
  const float q = fp8_mul_rn(x, d.reciprocal);
  if (d.exact) return q;
  const float negated_remainder = fp8_fma_rn(q, d.scale, -x);
  const float corrected = fp8_fma_rn(-negated_remainder, d.reciprocal, q);
  return d.finite ? corrected : q;
}

// The block scale before any UE8M0 rounding: max(amax, 1e-4) / 448, the same way.
EPC_FP8_QUOTIENT_FN float fp8_unrounded_scale(float amax) {
  const float clamped = amax > kFp8MinAmax ? amax : kFp8MinAmax;
  if (!(clamped <= FLT_MAX)) return clamped / kE4m3Max;  // the correction would make inf - inf
  constexpr float kReciprocal = 1.0f / kE4m3Max;         // correctly rounded at compile time
  return fp8_quotient(clamped, Fp8Divisor{kE4m3Max, kReciprocal, true, false});
}

}  // namespace epc::kernels

#undef EPC_FP8_QUOTIENT_FN
