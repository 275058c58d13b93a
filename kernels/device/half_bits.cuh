// SPDX-License-Identifier: Apache-2.0
// 16-bit float payloads (bf16 or fp16) read as raw bits and widened to fp32 exactly.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/device/bf16.cuh"

namespace epc::kernels {

__device__ __forceinline__ float half_bits_to_float(uint16_t bits, bool is_fp16) {
  return is_fp16 ? __half2float(__ushort_as_half(bits)) : bf16_bits_to_float(bits);
}

}  // namespace epc::kernels
