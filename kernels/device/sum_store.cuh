// SPDX-License-Identifier: Apache-2.0
// Storing eight fp32 sums (one 16-byte vector of bf16 input channels) into an output row of
// bf16, fp16 or fp32 elements, each rounded once to nearest even.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/device/bf16.cuh"
#include "kernels/wire/limits.hpp"
#include "kernels/wire/sum_output.hpp"

namespace epc::kernels {

// Writes sums[0..7] as channels vector * 8 .. vector * 8 + 7 of `row`.
__device__ __forceinline__ void store_sum_vector(void* row, int vector, const float (&sums)[kHalfChannelsPerVector],
                                                 SumOutput type) {
  static_assert(kHalfChannelsPerVector == 8, "a 16-byte vector holds eight 16-bit channels");
  if (type == SumOutput::kFp32) {
    float4* out = static_cast<float4*>(row) + 2 * vector;
    out[0] = make_float4(sums[0], sums[1], sums[2], sums[3]);
    out[1] = make_float4(sums[4], sums[5], sums[6], sums[7]);
    return;
  }
  uint16_t packed[kHalfChannelsPerVector];
  if (type == SumOutput::kFp16) {
#pragma unroll
    for (int e = 0; e < kHalfChannelsPerVector; ++e) packed[e] = __half_as_ushort(__float2half_rn(sums[e]));
  } else {
#pragma unroll
    for (int e = 0; e < kHalfChannelsPerVector; ++e) packed[e] = float_to_bf16_bits(sums[e]);
  }
  static_cast<int4*>(row)[vector] = *reinterpret_cast<const int4*>(packed);
}

}  // namespace epc::kernels
