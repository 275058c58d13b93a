// "Has every block of this launch finished its part?" Each block fences its writes at
// system scope and counts itself; the block that completes the count learns it is last
// and may publish the launch's results to peers. The counter is reset for the next launch.
#pragma once

#include <cstdint>

namespace epc::kernels {

// Call from every thread of every block. Returns true in thread 0 of the last block only.
__device__ __forceinline__ bool last_block_to_finish(uint32_t* counter) {
  __threadfence_system();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) {
    uint32_t arrived = atomicAdd(counter, 1u);
    last = arrived == gridDim.x - 1;
    if (last) {
      atomicExch(counter, 0u);
      __threadfence_system();
    }
  }
  __syncthreads();
  return threadIdx.x == 0 && last;
}

}  // namespace epc::kernels
