// Recording a device-side failure in the group's DeviceError: the first failure wins, so
// the host sees the root cause rather than the timeouts it caused further down.
#pragma once

#include <cuda/atomic>

#include "epcomm/epcomm.h"
#include "kernels/device_error.hpp"

namespace epc::kernels {

__device__ __forceinline__ void report_failure(DeviceError* error, uint32_t status, uint32_t phase,
                                               int rank, int peer, uint64_t waited_ns) {
  cuda::atomic_ref<uint32_t, cuda::thread_scope_system> word(error->status);
  uint32_t expected = 0;
  if (word.compare_exchange_strong(expected, 0xFFFFFFFFu, cuda::memory_order_acq_rel)) {
    error->phase = phase;
    error->rank = rank;
    error->peer = peer;
    error->waited_ns = waited_ns;
    word.store(status, cuda::memory_order_release);
  }
}

// True once any kernel of the group has recorded a failure: waits stop early then.
__device__ __forceinline__ bool group_failed(const DeviceError* error) {
  cuda::atomic_ref<const uint32_t, cuda::thread_scope_system> word(error->status);
  return word.load(cuda::memory_order_relaxed) != 0;
}

}  // namespace epc::kernels
