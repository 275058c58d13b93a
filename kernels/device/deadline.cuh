// SPDX-License-Identifier: Apache-2.0
// A bound on a spin-wait, read from the GPU's global nanosecond timer so it means the same
// on every SM and does not depend on clocks.
#pragma once

#include <cstdint>

namespace epc::kernels {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct Deadline {
  uint64_t start_ns;
  uint64_t timeout_ns;

  __device__ explicit Deadline(uint64_t timeout) : start_ns(global_timer_ns()), timeout_ns(timeout) {}
  __device__ uint64_t elapsed_ns() const { return global_timer_ns() - start_ns; }
  __device__ bool expired() const { return elapsed_ns() > timeout_ns; }
};

}  // namespace epc::kernels
