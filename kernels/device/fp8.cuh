// SPDX-License-Identifier: Apache-2.0
// Per-128-channel e4m3 quantization exactly as the reference model defines it
// (tests/reference/numeric.hpp): amax over the block (NaN never wins), scale = max(amax,
// 1e-4) / 448 (optionally rounded up to a power of two, UE8M0), q = satfinite(x / scale).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/wire/limits.hpp"

namespace epc::kernels {

__device__ __forceinline__ float ue8m0_round_up(float scale) {
  uint32_t bits = __float_as_uint(scale);
  if ((bits & 0x7FFFFFu) != 0) bits = (bits & ~0x7FFFFFu) + 0x800000u;
  return __uint_as_float(bits);
}

__device__ __forceinline__ float fp8_block_scale(float amax, bool round_scale_ue8m0) {
  const float clamped = amax > kFp8MinAmax ? amax : kFp8MinAmax;
  const float scale = __fdiv_rn(clamped, kE4m3Max);
  return round_scale_ue8m0 ? ue8m0_round_up(scale) : scale;
}

// The larger of two magnitudes, keeping `a` when `b` is NaN (as the reference's scan does).
__device__ __forceinline__ float amax_combine(float a, float b) { return b > a ? b : a; }

__device__ __forceinline__ uint8_t float_to_e4m3(float value) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace epc::kernels
