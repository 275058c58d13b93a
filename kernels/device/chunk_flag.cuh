// SPDX-License-Identifier: Apache-2.0
// A chunk flag of the high-throughput kernels: one uint64 that says "chunk c of step e has
// landed, and it covers rows [start, end)". The epoch (step + 1, so a zeroed window never
// matches) takes the top 24 bits, start and end 20 bits each (rows < 2^20 > 65536 tokens).
// A flag is rewritten only after its reader acknowledged the previous step, so equality of
// the 24-bit epoch cannot confuse two steps.
#pragma once

#include <cstdint>

namespace epc::kernels {

constexpr uint64_t kChunkEpochMask = (1ull << 24) - 1;
constexpr uint64_t kChunkRowMask = (1ull << 20) - 1;

__device__ __forceinline__ uint64_t chunk_epoch(uint64_t step) { return (step + 1) & kChunkEpochMask; }

__device__ __forceinline__ uint64_t chunk_flag(uint64_t step, uint32_t start, uint32_t end) {
  return (chunk_epoch(step) << 40) | (uint64_t{start} << 20) | uint64_t{end};
}

struct ChunkFlagOf {
  uint64_t epoch;
  __device__ bool operator()(uint64_t value) const { return (value >> 40) == epoch; }
};

__device__ __forceinline__ int chunk_flag_start(uint64_t value) {
  return static_cast<int>((value >> 20) & kChunkRowMask);
}
__device__ __forceinline__ int chunk_flag_end(uint64_t value) { return static_cast<int>(value & kChunkRowMask); }

// Signals that only grow (acknowledgements hold the acknowledged step + 1, layout signals
// the layout step + 1): reached once the value is at least `least`.
struct AtLeast {
  uint64_t least;
  __device__ bool operator()(uint64_t value) const { return value >= least; }
};

}  // namespace epc::kernels
