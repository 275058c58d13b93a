// SPDX-License-Identifier: Apache-2.0
// "Has every block of this launch finished its part?" Each block, once all its threads are
// past their writes, fences them from one thread and counts itself; the block that
// completes the count learns it is last and may publish the launch's results to peers
// (after its own system-scope fence). The counter is reset for the next launch.
//
// The block barrier orders every thread's writes before thread 0's fence, and fences are
// cumulative, so a GPU-scope fence per block plus one system-scope fence in the last block
// order every block's peer writes before the peer-visible signal that follows; there is no
// need for a system-scope fence in every thread.
#pragma once

#include <cstdint>

namespace epc::kernels {

// Call from every thread of every block. Returns true in every thread of the last block.
// `publish_system`: the last block goes on to publish the launch's writes to other GPUs or
// the network, so its fence is system-scope; otherwise a GPU-scope fence makes every
// block's writes visible to it (its atomic read then acts as an acquire).
__device__ __forceinline__ bool last_block_to_finish(uint32_t* counter, bool publish_system = true) {
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();
    uint32_t arrived = atomicAdd(counter, 1u);
    last = arrived == gridDim.x - 1;
    if (last) {
      atomicExch(counter, 0u);
      if (publish_system) {
        __threadfence_system();
      } else {
        __threadfence();
      }
    }
  }
  __syncthreads();
  return last;
}

}  // namespace epc::kernels
