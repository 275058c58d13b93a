// SPDX-License-Identifier: Apache-2.0
// A chunk flag of the high-throughput kernels: one uint64 that says "chunk c of step e has
// landed, and it covers rows [start, end)", in the format of kernels/wire/ht_message.hpp
// (ht_chunk_flag): an epoch that is never 0, so a zeroed window never matches, and repeats
// only every 2^29 steps; start and end below 2^17 (rows <= 65536 tokens). A flag is rewritten
// only after its reader acknowledged the previous step.
#pragma once

#include <cstdint>

#include "kernels/wire/ht_message.hpp"

namespace epc::kernels {

__device__ __forceinline__ uint64_t chunk_epoch(uint64_t step) { return ht_chunk_epoch(step); }

__device__ __forceinline__ uint64_t chunk_flag(uint64_t step, uint32_t start, uint32_t end) {
  return ht_chunk_flag(step, start, end);
}

struct ChunkFlagOf {
  uint64_t epoch;
  __device__ bool operator()(uint64_t value) const { return ht_chunk_flag_epoch(value) == epoch; }
};

__device__ __forceinline__ int chunk_flag_start(uint64_t value) { return ht_chunk_flag_start(value); }
__device__ __forceinline__ int chunk_flag_end(uint64_t value) { return ht_chunk_flag_end(value); }

// Signals that only grow (acknowledgements hold the acknowledged step + 1, layout signals
// the layout step + 1): reached once the value is at least `least`.
struct AtLeast {
  uint64_t least;
  __device__ bool operator()(uint64_t value) const { return value >= least; }
};

}  // namespace epc::kernels
