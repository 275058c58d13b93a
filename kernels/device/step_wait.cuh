// SPDX-License-Identifier: Apache-2.0
// A receive kernel's wait for every peer's signal of the current step, done once per launch:
// block 0 polls the peers' signals through the transport (one thread per peer), copies their payloads to a global
// mailbox and releases a local "ready" word; every other block waits on that word. Only
// nranks threads then poll memory that peers write over NVLink.
#pragma once

#include <cstdint>

#include "kernels/device/signal_wait.cuh"

namespace epc::kernels {

constexpr uint64_t kReadyFailed = 1ull << 63;

// Returns true in every thread once every peer's signal carries `epoch`; `payload`
// (shared, [nranks], may be null) then holds their low 32 bits, through `mailbox` (global,
// [nranks], needed when payload is not null). Returns false in every thread on a timeout or
// a failed group (recorded in `error`).
__device__ __forceinline__ bool wait_for_step(const PeerTransport& transport, uint64_t signal_offset, int nranks,
                                              uint32_t epoch, uint64_t* ready, int32_t* mailbox, uint32_t* payload,
                                              uint64_t timeout_ns, DeviceError* error, uint32_t phase, int rank) {
  if (blockIdx.x == 0) {
    const bool ok =
        wait_for_peers_signal(transport, signal_offset, nranks, epoch, payload, timeout_ns, error, phase, rank);
    if (ok && payload != nullptr) {
      for (int s = threadIdx.x; s < nranks; s += blockDim.x) mailbox[s] = static_cast<int32_t>(payload[s]);
    }
    __syncthreads();
    if (threadIdx.x == 0) store_release_gpu(ready, ok ? epoch : (epoch | kReadyFailed));
    return ok;
  }
  __shared__ int failed;
  if (threadIdx.x == 0) {
    // A longer bound than block 0's, so that block 0, which knows which peer is missing,
    // is the one to report a timeout.
    // A timeout here names no peer (-1); block 0's own failure arrives as the epoch with
    // kReadyFailed set.
    uint64_t value = 0;
    const bool ok =
        poll_until([&] { return load_acquire_gpu(ready); }, [&](uint64_t v) { return (v & ~kReadyFailed) == epoch; },
                   &value, timeout_ns + timeout_ns / 4, error, phase, rank, -1);
    failed = ok && (value & kReadyFailed) == 0 ? 0 : 1;
  }
  __syncthreads();
  if (failed == 0 && payload != nullptr) {
    for (int s = threadIdx.x; s < nranks; s += blockDim.x) payload[s] = static_cast<uint32_t>(mailbox[s]);
  }
  __syncthreads();
  return failed == 0;
}

}  // namespace epc::kernels
