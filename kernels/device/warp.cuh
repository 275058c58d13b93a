// Warp-level indexing shared by kernels that give one warp per item.
#pragma once

namespace epc::kernels {

constexpr int kWarpSize = 32;

__device__ __forceinline__ int lane_id() { return threadIdx.x % kWarpSize; }
__device__ __forceinline__ int global_warp() { return (blockIdx.x * blockDim.x + threadIdx.x) / kWarpSize; }
__device__ __forceinline__ int total_warps() { return gridDim.x * blockDim.x / kWarpSize; }

}  // namespace epc::kernels
