// SPDX-License-Identifier: Apache-2.0
// Per-128-channel e4m3 quantization exactly as the reference model defines it
// (tests/reference/numeric.hpp): amax over the block (NaN never wins), scale = max(amax,
// 1e-4) / 448 (optionally rounded up to a power of two, UE8M0), q = satfinite(x / scale),
// each quotient taken without a division (kernels/wire/fp8_quotient.hpp).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/device/half_bits.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/wire/fp8_quotient.hpp"
#include "kernels/wire/limits.hpp"

namespace epc::kernels {

__device__ __forceinline__ float ue8m0_round_up(float scale) {
  uint32_t bits = __float_as_uint(scale);
  if ((bits & 0x7FFFFFu) != 0) bits = (bits & ~0x7FFFFFu) + 0x800000u;
  return __uint_as_float(bits);
}

__device__ __forceinline__ float fp8_block_scale(float amax, bool round_scale_ue8m0) {
  const float scale = fp8_unrounded_scale(amax);
  return round_scale_ue8m0 ? ue8m0_round_up(scale) : scale;
}

// The larger of two magnitudes, keeping `a` when `b` is NaN (as the reference's scan does).
__device__ __forceinline__ float amax_combine(float a, float b) { return b > a ? b : a; }

// The largest of the amaxes of the 16 lanes of this lane's half of the warp, called by the
// whole warp. An amax from amax_combine is never NaN nor negative, and non-negative floats
// order as their bits do, so two warp-wide integer max reductions (one per half, the other
// half giving 0) replace four dependent shuffles.
__device__ __forceinline__ float half_warp_amax(float amax) {
  const unsigned bits = __float_as_uint(amax);
  const bool upper = lane_id() >= kWarpSize / 2;
  const unsigned lower_max = __reduce_max_sync(0xffffffffu, upper ? 0u : bits);
  const unsigned upper_max = __reduce_max_sync(0xffffffffu, upper ? bits : 0u);
  return __uint_as_float(upper ? upper_max : lower_max);
}

// The largest of the amaxes of the 8 lanes of this lane's quarter of the warp (lanes 8q to
// 8q + 7), called by the whole warp.
__device__ __forceinline__ float quarter_warp_amax(float amax) {
  for (int offset = 1; offset < kWarpSize / 4; offset *= 2)
    amax = amax_combine(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  return amax;
}

// The eight 16-bit values of one vector as fp32 into `values`; returns their amax.
__device__ __forceinline__ float widen_half_vector(int4 raw, bool is_fp16, float* values) {
  const uint16_t* half = reinterpret_cast<const uint16_t*>(&raw);
  float amax = 0.0f;
  for (int e = 0; e < kHalfChannelsPerVector; ++e) {
    values[e] = half_bits_to_float(half[e], is_fp16);
    amax = amax_combine(amax, fabsf(values[e]));
  }
  return amax;
}

__device__ __forceinline__ uint8_t float_to_e4m3(float value) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E4M3));
}

// float_to_e4m3 of two values in one conversion: `low` in the low byte.
__device__ __forceinline__ uint16_t float2_to_e4m3x2(float low, float high) {
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(low, high), __NV_SATFINITE, __NV_E4M3));
}

// Eight values of one vector (widen_half_vector) quantized with the divisor of their block's
// scale: eight e4m3 bytes, the first value's lowest. kExact: divisor.exact, as a constant.
template <bool kExact>
__device__ __forceinline__ uint2 e4m3_vector_of(const float* values, Fp8Divisor divisor) {
  divisor.exact = kExact;
  uint16_t q[kHalfChannelsPerVector / 2];
  for (int e = 0; e < kHalfChannelsPerVector; e += 2) {
    q[e / 2] = float2_to_e4m3x2(fp8_quotient(values[e], divisor), fp8_quotient(values[e + 1], divisor));
  }
  return make_uint2(q[0] | (static_cast<uint32_t>(q[1]) << 16), q[2] | (static_cast<uint32_t>(q[3]) << 16));
}

// The same, by a branch that is uniform over the launch (exact scales are its UE8M0
// rounding's), so that a power-of-two scale's products run without the corrections.
__device__ __forceinline__ uint2 e4m3_vector(const float* values, Fp8Divisor divisor) {
  return divisor.exact ? e4m3_vector_of<true>(values, divisor) : e4m3_vector_of<false>(values, divisor);
}

// A vector's cast: its e4m3 bytes (eight, or sixteen for two 16-bit vectors) and its block's
// scale.
struct Fp8Vector8 {
  uint2 q;
  float scale;
};
struct Fp8Vector16 {
  uint4 q;
  float scale;
};

// The cast of one 16-bit vector whose 128-channel block the 16 lanes of this lane's half of the
// warp hold, called by the whole warp.
__device__ __forceinline__ Fp8Vector8 half_warp_cast(int4 raw, bool is_fp16, bool round_scale_ue8m0) {
  float values[kHalfChannelsPerVector];
  const float amax = half_warp_amax(widen_half_vector(raw, is_fp16, values));
  Fp8Vector8 v;
  v.scale = fp8_block_scale(amax, round_scale_ue8m0);
  v.q = e4m3_vector(values, fp8_divisor(v.scale, round_scale_ue8m0));
  return v;
}

// The cast of two 16-bit vectors (raw[0, 2)) whose block the 8 lanes of this lane's quarter of
// the warp hold, called by the whole warp.
__device__ __forceinline__ Fp8Vector16 quarter_warp_cast(const int4* raw, bool is_fp16, bool round_scale_ue8m0) {
  float values[2 * kHalfChannelsPerVector];
  const float amax = quarter_warp_amax(
      amax_combine(widen_half_vector(raw[0], is_fp16, values), widen_half_vector(raw[1], is_fp16, values + 8)));
  Fp8Vector16 v;
  v.scale = fp8_block_scale(amax, round_scale_ue8m0);
  const Fp8Divisor divisor = fp8_divisor(v.scale, round_scale_ue8m0);
  const uint2 low = e4m3_vector(values, divisor), high = e4m3_vector(values + 8, divisor);
  v.q = make_uint4(low.x, low.y, high.x, high.y);
  return v;
}

// Holds a cast made before a block barrier there: with no use before the barrier the compiler
// may sink the arithmetic past it to the stores, and the warps that were to cast while the
// first warp routes would cast after the barrier after all.
__device__ __forceinline__ void hold_before_barrier(Fp8Vector8& v) {
  asm volatile("" : "+r"(v.q.x), "+r"(v.q.y), "+f"(v.scale));
}
__device__ __forceinline__ void hold_before_barrier(Fp8Vector16& v) {
  asm volatile("" : "+r"(v.q.x), "+r"(v.q.y), "+r"(v.q.z), "+r"(v.q.w), "+f"(v.scale));
}

// Which of a round's vectors this thread casts: the first warp takes the round's last ones, the
// others the rest in order. A small step's slice of a row has fewer vectors than a round, so
// the first warp, which routes or places the token, casts none of them, and the other warps
// cast theirs before the block barrier that follows the routing, while it runs. Whole warps
// keep whole blocks (and UE8M0 words of four blocks): the rotation is by one warp.
__device__ __forceinline__ int fp8_cast_thread() {
  const int t = static_cast<int>(threadIdx.x);
  return t >= kWarpSize ? t - kWarpSize : t + static_cast<int>(blockDim.x) - kWarpSize;
}

// Whether this thread's warp has a vector of the slice [begin, end) in a round's first
// (fp8_cast_thread): one with none would cast zeros that nothing stores, and for the first
// warp that cast lies between its routing or placing and the block barrier. Warp-uniform, so
// the cast's shuffles stay whole.
__device__ __forceinline__ bool fp8_warp_casts(int begin, int end) {
  return begin + fp8_cast_thread() - lane_id() < end;
}

}  // namespace epc::kernels
