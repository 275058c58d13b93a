// SPDX-License-Identifier: Apache-2.0
// bf16 <-> fp32 on raw 16-bit values, with the rounding the reference model defines
// (round to nearest even), and products rounded before adds (no FMA).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace epc::kernels {

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

// acc + w * y with the product rounded to fp32 first.
__device__ __forceinline__ float add_rounded_product(float acc, float w, float y) {
  return __fadd_rn(acc, __fmul_rn(w, y));
}

}  // namespace epc::kernels
