// SPDX-License-Identifier: Apache-2.0
// Bit-exact number formats of the CPU reference model.
//
// The GPU kernels must reproduce the reference model bit for bit, so every conversion here is
// written on the bit patterns (no reliance on the host's rounding mode, no F16C/AVX512-BF16
// intrinsics, no std::nearbyint). Each function documents the exact rule; where CUDA has a
// matching intrinsic it is named, and the rule is chosen to equal it.
//
// Formats (all values are passed as raw bits):
//   bf16  uint16_t, 1 sign / 8 exponent / 7 mantissa bits (the top half of an IEEE float).
//   fp16  uint16_t, IEEE binary16: 1 / 5 (bias 15) / 10, with subnormals, inf and NaN.
//   e4m3  uint8_t, OCP FP8 E4M3FN: 1 / 4 (bias 7) / 3, with subnormals, NO infinity;
//         S.1111.111 is NaN, the largest finite value is S.1111.110 = 448.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/wire/limits.hpp"

namespace epc::ref {

// The 16-bit element type of token rows handed to dispatch.
enum class Dtype { kBf16, kFp16 };

// ---- bf16 ---------------------------------------------------------------------------------

// float -> bf16, round to nearest, ties to even (equals CUDA __float2bfloat16_rn).
// Finite values too large for bf16 round to +-inf exactly as RNE prescribes. Any NaN input
// (quiet or signalling, either sign) gives the canonical quiet NaN 0x7FFF, as CUDA does.
uint16_t float_to_bf16(float value);

// bf16 -> float: exact (the bits become the top half of the float).
float bf16_to_float(uint16_t bits);

// ---- fp16 ---------------------------------------------------------------------------------

// float -> IEEE half, round to nearest, ties to even (equals CUDA __float2half_rn).
// |value| >= 65520 (the midpoint above 65504) and +-inf give +-inf; results below the normal
// range are correctly rounded subnormals (2^-25 is a tie and rounds to +-0). Any NaN gives the
// canonical quiet NaN 0x7FFF, as CUDA does.
uint16_t float_to_fp16(float value);

// IEEE half -> float: exact, including subnormals, +-inf, and NaN (stays NaN).
float fp16_to_float(uint16_t bits);

// 16-bit element of the given dtype -> float (exact).
float to_float(Dtype dtype, uint16_t bits);

// ---- fp8 e4m3 -----------------------------------------------------------------------------

// Largest finite e4m3 magnitude and its bit pattern (without sign).
using kernels::kE4m3Max;
constexpr uint8_t kE4m3MaxBits = 0x7E;
// The NaN this model produces (CUDA produces 0x7F for any NaN input, whatever its sign).
constexpr uint8_t kE4m3NaNBits = 0x7F;

// float -> e4m3, round to nearest, ties to even, SATURATING to the finite range: equals
// __nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E4M3).
//   |value| > 448 (including +-inf) -> +-448 (0x7E / 0xFE).
//   NaN (any sign) -> 0x7F.
//   -0.0 -> 0x80, +0.0 -> 0x00; subnormal results (multiples of 2^-9 below 2^-6) are
//   correctly rounded; 2^-10 is a tie and rounds to +-0.
uint8_t float_to_e4m3_satfinite(float value);

// e4m3 -> float: exact. 0x7F and 0xFF decode to NaN.
float e4m3_to_float(uint8_t bits);

// ---- per-128-channel fp8 block quantization ---------------------------------------------

// Channels per scale: one float scale covers this many consecutive channels of a row.
using kernels::kFp8BlockChannels;

// Scales never get smaller than this amax would give, so all-zero blocks have a finite scale.
using kernels::kFp8MinAmax;

// Rounds a positive float UP to the next power of two (unchanged if it already is one):
// if any mantissa bit is set, clear the mantissa and add one to the exponent. Meant for the
// normal, finite scales produced below (UE8M0 scales carry only an exponent); +inf stays +inf.
float ue8m0_round_up(float scale);

// The scale of one block from its amax (the largest |x| of the block):
//   amax  = max(amax, 1e-4f)
//   scale = amax / 448.0f                      (one IEEE float division)
//   if round_scale_ue8m0: scale = ue8m0_round_up(scale)
float fp8_block_scale(float amax, bool round_scale_ue8m0);

// Quantizes one row of `hidden` floats (hidden % 128 == 0, else std::invalid_argument) into
// `hidden` e4m3 bytes and hidden/128 float scales. For each block b of 128 channels:
//   amax = max |x[i]| over the block, starting from 0.0f and comparing with `>`, so NaN
//          entries never become the amax (like CUDA fmaxf);
//   scale[b] = fp8_block_scale(amax, round_scale_ue8m0);
//   q[i] = float_to_e4m3_satfinite(x[i] / scale[b])   (one IEEE float division per element;
//          no multiplication by a reciprocal).
// An infinite input makes amax and the scale +inf, so that block quantizes to zeros/NaN;
// callers are expected to pass finite rows.
void quantize_row_fp8(const float* x, int hidden, bool round_scale_ue8m0, uint8_t* q_out, float* scales_out);

// ---- exact accumulation step ------------------------------------------------------------

// acc + a * b with the product rounded to float BEFORE the addition (never a fused
// multiply-add), whatever the compiler's contraction settings. The combine semantics are
// defined with this step; GPU kernels must use __fmul_rn then __fadd_rn (or -fmad=false).
inline float add_rounded_product(float acc, float a, float b) {
  // A volatile store forces the product to be rounded to float on its own.
  volatile float product = a * b;
  return acc + product;
}

}  // namespace epc::ref
