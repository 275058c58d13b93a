// SPDX-License-Identifier: Apache-2.0
// "Has every block of this launch finished its part?" Each block, once all its threads are
// past their writes, counts itself from one thread with a release-acquire atomic add; the
// block that completes the count learns it is last and may publish the launch's results to
// peers. The counter is reset for the next launch.
//
// The block barrier orders every thread's writes before thread 0's add, and release is
// cumulative, so every block's writes happen before the last block's acquiring add, and
// before whatever it publishes with a release (a peer's signal word) or after its own
// system-scope fence; no thread needs a fence of its own. Release-acquire, not the
// sequentially consistent fences of __threadfence(): nothing here orders a store before a
// later load of another word, and the weaker order costs less on the launch's critical path.
#pragma once

#include <cstdint>

#include <cuda/atomic>

namespace epc::kernels {

// Call from every thread of every block. Returns true in every thread of the last block.
// `publish_system`: the last block goes on to publish the launch's writes to other GPUs or
// the network, so it also fences at system scope.
__device__ __forceinline__ bool last_block_to_finish(uint32_t* counter, bool publish_system = true) {
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device> count(*counter);
    last = count.fetch_add(1u, cuda::memory_order_acq_rel) == gridDim.x - 1;
    if (last) {
      count.store(0u, cuda::memory_order_relaxed);
      if (publish_system) cuda::atomic_thread_fence(cuda::memory_order_acq_rel, cuda::thread_scope_system);
    }
  }
  __syncthreads();
  return last;
}

}  // namespace epc::kernels
