// SPDX-License-Identifier: Apache-2.0
// Warp-level indexing shared by kernels that give one warp per item.
#pragma once

namespace epc::kernels {

constexpr int kWarpSize = 32;

__device__ __forceinline__ int lane_id() { return threadIdx.x % kWarpSize; }
__device__ __forceinline__ int warps_per_block() { return blockDim.x / kWarpSize; }
__device__ __forceinline__ int total_warps() { return gridDim.x * blockDim.x / kWarpSize; }

// The sum of `value` over the warp's lanes, in every lane. Every lane must call.
__device__ __forceinline__ int warp_sum(int value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Warp number for items handed out one per warp, interleaved across blocks (item i goes to
// block i % gridDim.x), so a few items still spread over many SMs.
__device__ __forceinline__ int spread_warp() {
  return static_cast<int>(threadIdx.x / kWarpSize) * gridDim.x + blockIdx.x;
}

}  // namespace epc::kernels
