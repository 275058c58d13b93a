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
// tests/unit/test_fp8_quotient.cpp checks this against the division for every bf16 and
// fp16 value under every scale the cast can produce, and the block scale's own division by
// 448 for every amax, and an infinite scale (an infinite amax) against the division too.
// Host and device compile the same operations (kernels/device/fp8.cuh casts with it).
#pragma once

#include <cfloat>
#include <cmath>

#include "kernels/wire/limits.hpp"

#ifdef __CUDACC__
#define EPC_FP8_QUOTIENT_FN __host__ __device__ inline
#else
#define EPC_FP8_QUOTIENT_FN inline
#endif

namespace epc::kernels {

// A scale and its correctly rounded reciprocal; `finite` false for an infinite scale, whose
// correction would make 0 * inf (its reciprocal is 0).
struct Fp8Divisor {
  float scale;
  float reciprocal;
  bool finite;
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

EPC_FP8_QUOTIENT_FN Fp8Divisor fp8_divisor(float scale) {
#ifdef __CUDA_ARCH__
  const float reciprocal = __frcp_rn(scale);
#else
  const float reciprocal = 1.0f / scale;
#endif
  return Fp8Divisor{scale, reciprocal, scale <= FLT_MAX};
}

// x / d.scale, rounded to nearest even (exactly so for normal quotients; see above). Under an
// infinite scale the reciprocal is 0 and the uncorrected product x * 0 is the quotient
// (signed zero for finite x, NaN for infinite or NaN x), chosen without a branch.
EPC_FP8_QUOTIENT_FN float fp8_quotient(float x, Fp8Divisor d) {
  const float q = fp8_mul_rn(x, d.reciprocal);
  const float negated_remainder = fp8_fma_rn(q, d.scale, -x);
  const float corrected = fp8_fma_rn(-negated_remainder, d.reciprocal, q);
  return d.finite ? corrected : q;
}

// The block scale before any UE8M0 rounding: max(amax, 1e-4) / 448, the same way.
EPC_FP8_QUOTIENT_FN float fp8_unrounded_scale(float amax) {
  const float clamped = amax > kFp8MinAmax ? amax : kFp8MinAmax;
  if (!(clamped <= FLT_MAX)) return clamped / kE4m3Max;  // the correction would make inf - inf
  constexpr float kReciprocal = 1.0f / kE4m3Max;         // correctly rounded at compile time
  return fp8_quotient(clamped, Fp8Divisor{kE4m3Max, kReciprocal, true});
}

}  // namespace epc::kernels

#undef EPC_FP8_QUOTIENT_FN
