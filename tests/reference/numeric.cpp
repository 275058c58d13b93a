// SPDX-License-Identifier: Apache-2.0
// Bit-level conversions between float and the 16- and 8-bit formats; see numeric.hpp for the
// exact rules. Everything works on integer bit patterns so the result never depends on the
// host FPU's rounding mode or on which conversion instructions the compiler picks.
#include "tests/reference/numeric.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace epc::ref {
namespace {

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float float_of(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

constexpr uint32_t kFloatSignMask = 0x80000000u;
constexpr uint32_t kFloatAbsMask = 0x7FFFFFFFu;
constexpr uint32_t kFloatInfBits = 0x7F800000u;
constexpr uint32_t kFloatMantissaMask = 0x007FFFFFu;
constexpr uint32_t kFloatImplicitBit = 0x00800000u;
constexpr int kFloatExponentBias = 127;

// Shifts `magnitude` right by `shift` (1..31) and rounds the dropped bits to nearest, ties to
// even. A carry out of the kept bits is intended: it bumps the exponent field of the packed
// result, which is exactly how a rounded-up significand overflows into the next binade.
uint32_t shift_right_round_even(uint32_t magnitude, int shift) {
  const uint32_t kept = magnitude >> shift;
  const uint32_t dropped = magnitude & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (dropped > halfway || (dropped == halfway && (kept & 1u) != 0)) return kept + 1u;
  return kept;
}

// Packs |value| (given as float bits without sign, finite and not NaN) into a smaller binary
// format with `mantissa_bits` and exponent bias `bias`, rounding to nearest even. Handles
// results in the target's subnormal range. Returns the unsigned target bits; the caller deals
// with overflow (the result may exceed the target's largest finite pattern).
uint32_t round_to_narrow_format(uint32_t abs_bits, int mantissa_bits, int bias) {
  const int float_exponent = static_cast<int>(abs_bits >> 23);
  if (float_exponent == 0) return 0;  // float zero or subnormal: far below any target's range
  const int target_exponent = float_exponent - kFloatExponentBias + bias;
  const int dropped_bits = 23 - mantissa_bits;
  if (target_exponent >= 1) {
    // Normal result: exponent field, then the mantissa with its low bits rounded away.
    const uint32_t unrounded = (static_cast<uint32_t>(target_exponent) << 23) | (abs_bits & kFloatMantissaMask);
    return shift_right_round_even(unrounded, dropped_bits);
  }
  // Subnormal result: the significand including its implicit 1, shifted further right by the
  // exponent deficit. Shifts past 24 bits leave less than half of the smallest subnormal.
  const uint32_t significand = (abs_bits & kFloatMantissaMask) | kFloatImplicitBit;
  const int shift = dropped_bits + 1 - target_exponent;
  if (shift > 24) return 0;
  return shift_right_round_even(significand, shift);
}

}  // namespace

// ---- bf16 ---------------------------------------------------------------------------------

uint16_t float_to_bf16(float value) {
  const uint32_t bits = bits_of(value);
  if ((bits & kFloatAbsMask) > kFloatInfBits) return 0x7FFF;  // NaN -> canonical quiet NaN
  // bf16 keeps the float's exponent, so rounding the low 16 bits is the whole conversion;
  // a carry into the exponent (up to inf) is the correct RNE result.
  const uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7FFFu + lsb) >> 16);
}

float bf16_to_float(uint16_t bits) { return float_of(static_cast<uint32_t>(bits) << 16); }

// ---- fp16 ---------------------------------------------------------------------------------

uint16_t float_to_fp16(float value) {
  const uint32_t bits = bits_of(value);
  const uint16_t sign = static_cast<uint16_t>((bits & kFloatSignMask) >> 16);
  const uint32_t abs_bits = bits & kFloatAbsMask;
  if (abs_bits > kFloatInfBits) return 0x7FFF;  // NaN -> canonical quiet NaN
  // 2^16 and above (including inf) is past every value that rounds to 65504.
  if (abs_bits >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00u);
  // Below 2^16 the rounded result is at most 0x7C00 (inf), reached by a round-up carry.
  const uint32_t magnitude = round_to_narrow_format(abs_bits, 10, 15);
  return static_cast<uint16_t>(sign | magnitude);
}

float fp16_to_float(uint16_t bits) {
  const uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) {
    // inf keeps a zero mantissa; NaN keeps its payload (shifted into the float's mantissa).
    return float_of(sign | kFloatInfBits | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float (a small integer times a power of 2).
    const float magnitude = static_cast<float>(mantissa) * float_of(0x33800000u);  // 2^-24
    return float_of(sign | bits_of(magnitude));
  }
  return float_of(sign | ((exponent - 15 + kFloatExponentBias) << 23) | (mantissa << 13));
}

float to_float(Dtype dtype, uint16_t bits) { return dtype == Dtype::kBf16 ? bf16_to_float(bits) : fp16_to_float(bits); }

// ---- fp8 e4m3 -----------------------------------------------------------------------------

uint8_t float_to_e4m3_satfinite(float value) {
  const uint32_t bits = bits_of(value);
  const uint8_t sign = static_cast<uint8_t>((bits & kFloatSignMask) >> 24);
  const uint32_t abs_bits = bits & kFloatAbsMask;
  if (abs_bits > kFloatInfBits) return kE4m3NaNBits;
  // Saturation: everything above 448 (the rounding would give 448, 480 or more, or inf
  // for inf) becomes the largest finite value.
  if (abs_bits > bits_of(kE4m3Max)) return static_cast<uint8_t>(sign | kE4m3MaxBits);
  // At or below 448 rounding never passes 0x7E, so no NaN pattern can appear.
  const uint32_t magnitude = round_to_narrow_format(abs_bits, 3, 7);
  return static_cast<uint8_t>(sign | magnitude);
}

float e4m3_to_float(uint8_t bits) {
  const uint32_t sign = (static_cast<uint32_t>(bits) & 0x80u) << 24;
  const uint32_t exponent = (bits >> 3) & 0xFu;
  const uint32_t mantissa = bits & 0x7u;
  if (exponent == 0xF && mantissa == 0x7) return float_of(sign | 0x7FC00000u);  // NaN
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-9, exact in float.
    const float magnitude = static_cast<float>(mantissa) * float_of(0x3B000000u);  // 2^-9
    return float_of(sign | bits_of(magnitude));
  }
  return float_of(sign | ((exponent - 7 + kFloatExponentBias) << 23) | (mantissa << 20));
}

// ---- per-128-channel fp8 block quantization ---------------------------------------------

float ue8m0_round_up(float scale) {
  uint32_t bits = bits_of(scale);
  if ((bits & kFloatMantissaMask) != 0) {
    bits = (bits & ~kFloatMantissaMask) + kFloatImplicitBit;  // next exponent, empty mantissa
  }
  return float_of(bits);
}

float fp8_block_scale(float amax, bool round_scale_ue8m0) {
  const float clamped = amax > kFp8MinAmax ? amax : kFp8MinAmax;
  const float scale = clamped / kE4m3Max;
  return round_scale_ue8m0 ? ue8m0_round_up(scale) : scale;
}

void quantize_row_fp8(const float* x, int hidden, bool round_scale_ue8m0, uint8_t* q_out, float* scales_out) {
  if (hidden <= 0 || hidden % kFp8BlockChannels != 0) {
    throw std::invalid_argument(
        "epc::ref::quantize_row_fp8: hidden must be a positive multiple "
        "of 128 for fp8 block quantization, got " +
        std::to_string(hidden));
  }
  for (int block = 0; block < hidden / kFp8BlockChannels; ++block) {
    const int begin = block * kFp8BlockChannels;
    float amax = 0.0f;
    for (int i = begin; i < begin + kFp8BlockChannels; ++i) {
      const float magnitude = float_of(bits_of(x[i]) & kFloatAbsMask);
      if (magnitude > amax) amax = magnitude;
    }
    const float scale = fp8_block_scale(amax, round_scale_ue8m0);
    scales_out[block] = scale;
    for (int i = begin; i < begin + kFp8BlockChannels; ++i) {
      q_out[i] = float_to_e4m3_satfinite(x[i] / scale);
    }
  }
}

}  // namespace epc::ref
