// Waiting for every peer's signal of the current step, bounded by the group's timeout.
// Threads of the block split the peers; the block agrees on the outcome.
#pragma once

#include <cstdint>

#include "kernels/device/deadline.cuh"
#include "kernels/device/flags.cuh"
#include "kernels/device/report.cuh"

namespace epc::kernels {

constexpr uint32_t kPollsPerCheck = 1024;
constexpr uint32_t kPollSleepNs = 100;

// Waits until signals[p] >> 32 == epoch for every p < nranks; stores the low 32 bits of each
// signal in `payload[p]` (shared memory, may be null). Returns false (in every thread) if
// a wait timed out or the group had already failed; the failure is then recorded.
__device__ __forceinline__ bool wait_for_peers(uint64_t* signals, int nranks, uint32_t epoch,
                                               uint32_t* payload, uint64_t timeout_ns,
                                               DeviceError* error, uint32_t phase, int rank) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < nranks; p += blockDim.x) {
    Deadline deadline(timeout_ns);
    uint64_t value;
    for (uint32_t spins = 0; static_cast<uint32_t>((value = load_acquire(&signals[p])) >> 32) != epoch; ++spins) {
      // The group's error word lives in host memory: reading it over PCIe at every poll
      // from every waiting block stretched each step by hundreds of microseconds on 4 H200
      // with 132 blocks (measured), so it and the deadline are checked every
      // kPollsPerCheck polls only (about every 0.3 ms).
      __nanosleep(kPollSleepNs);
      if (spins % kPollsPerCheck != kPollsPerCheck - 1) continue;
      if (deadline.expired()) {
        report_failure(error, EPC_ERR_TIMEOUT, phase, rank, p, deadline.elapsed_ns());
        failed = 1;
        break;
      }
      if (group_failed(error)) {
        failed = 1;
        break;
      }
    }
    if (payload != nullptr) payload[p] = static_cast<uint32_t>(value);
  }
  __syncthreads();
  return failed == 0;
}

}  // namespace epc::kernels
