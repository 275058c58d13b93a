// SPDX-License-Identifier: Apache-2.0
// Recording a device-side failure in the group's DeviceError: the first failure wins, so
// the host sees the root cause rather than the timeouts it caused further down.
#pragma once

#include <cuda/atomic>

#include "epcomm/epcomm.h"
#include "kernels/wire/device_error.hpp"

namespace epc::kernels {

__device__ __forceinline__ void report_failure(DeviceError* error, uint32_t status, uint32_t phase, int rank, int peer,
                                               uint64_t waited_ns, uint64_t seen = 0, uint32_t wanted = 0) {
  // Every kernel of a group runs on the group's GPU: a device-scope claim decides the first.
  cuda::atomic_ref<uint32_t, cuda::thread_scope_device> claim(*error->claim);
  if (claim.exchange(1u, cuda::memory_order_relaxed) != 0u) return;
  volatile DeviceError* record = error;
  record->phase = phase;
  record->rank = rank;
  record->peer = peer;
  record->waited_ns = waited_ns;
  // Only step signals' waits say what they wanted (the record starts zeroed): the other
  // waits, inlined with wanted 0, then carry no code for it.
  if (wanted != 0) {
    record->seen = seen;
    record->wanted = wanted;
  }
  __threadfence_system();  // the fields before the status that announces them
  record->status = status;
}

// True once any kernel of the group has recorded a failure: waits stop early then.
__device__ __forceinline__ bool group_failed(const DeviceError* error) {
  return static_cast<const volatile DeviceError*>(error)->status != 0;
}

}  // namespace epc::kernels
