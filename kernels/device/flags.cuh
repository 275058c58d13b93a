// SPDX-License-Identifier: Apache-2.0
// System-scope release stores and acquire loads of 64-bit flags: a flag written into a
// peer's window over NVLink must publish every store made before it.
#pragma once

#include <cstdint>
#include <cuda/atomic>

namespace epc::kernels {

__device__ __forceinline__ void store_release(uint64_t* flag, uint64_t value) {
  cuda::atomic_ref<uint64_t, cuda::thread_scope_system> ref(*flag);
  ref.store(value, cuda::memory_order_release);
}

__device__ __forceinline__ uint64_t load_acquire(uint64_t* flag) {
  cuda::atomic_ref<uint64_t, cuda::thread_scope_system> ref(*flag);
  return ref.load(cuda::memory_order_acquire);
}

// The same at GPU scope, for words only this GPU's blocks write and read.
__device__ __forceinline__ void store_release_gpu(uint64_t* flag, uint64_t value) {
  cuda::atomic_ref<uint64_t, cuda::thread_scope_device> ref(*flag);
  ref.store(value, cuda::memory_order_release);
}

__device__ __forceinline__ uint64_t load_acquire_gpu(uint64_t* flag) {
  cuda::atomic_ref<uint64_t, cuda::thread_scope_device> ref(*flag);
  return ref.load(cuda::memory_order_acquire);
}

}  // namespace epc::kernels
