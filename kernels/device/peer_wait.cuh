// Waiting for flags that peers write into this rank's window, bounded by the group's
// timeout.
#pragma once

#include <cstdint>

#include "kernels/device/deadline.cuh"
#include "kernels/device/flags.cuh"
#include "kernels/device/report.cuh"

namespace epc::kernels {

constexpr uint32_t kPollsPerCheck = 1024;
constexpr uint32_t kPollSleepNs = 100;

// One thread waits until `reached(*flag)`; `*value` receives the last value read. Returns
// false on a timeout (recorded as `phase`, waiting `rank`, missing `peer`) or when the group
// has failed elsewhere.
template <typename Reached>
__device__ __forceinline__ bool wait_for_flag(uint64_t* flag, Reached reached, uint64_t* value,
                                              uint64_t timeout_ns, DeviceError* error,
                                              uint32_t phase, int rank, int peer) {
  Deadline deadline(timeout_ns);
  for (uint32_t spins = 0; !reached(*value = load_acquire(flag)); ++spins) {
    // The group's error word lives in host memory: reading it over PCIe at every poll
    // from every waiting block stretched each step by hundreds of microseconds on 4 H200
    // with 132 blocks (measured), so it and the deadline are checked every
    // kPollsPerCheck polls only (about every 0.3 ms).
    __nanosleep(kPollSleepNs);
    if (spins % kPollsPerCheck != kPollsPerCheck - 1) continue;
    if (deadline.expired()) {
      report_failure(error, EPC_ERR_TIMEOUT, phase, rank, peer, deadline.elapsed_ns());
      return false;
    }
    if (group_failed(error)) return false;
  }
  return true;
}

// Threads of the block split the peers; every thread returns the block's outcome. Waits
// until reached(signals[p]) for every p < nranks; stores the low 32 bits of each signal in
// `payload[p]` (shared memory, may be null).
template <typename Reached>
__device__ __forceinline__ bool wait_for_every_peer(uint64_t* signals, int nranks, Reached reached,
                                                    uint32_t* payload, uint64_t timeout_ns,
                                                    DeviceError* error, uint32_t phase, int rank) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < nranks; p += blockDim.x) {
    uint64_t value = 0;
    if (!wait_for_flag(&signals[p], reached, &value, timeout_ns, error, phase, rank, p)) failed = 1;
    if (payload != nullptr) payload[p] = static_cast<uint32_t>(value);
  }
  __syncthreads();
  return failed == 0;
}

// The same for one warp, lanes splitting the flags; every lane returns the warp's outcome.
template <typename Reached>
__device__ __forceinline__ bool warp_wait_for_every_peer(uint64_t* signals, int nranks, Reached reached,
                                                         uint64_t timeout_ns, DeviceError* error,
                                                         uint32_t phase, int rank) {
  bool ok = true;
  for (int p = threadIdx.x % 32; p < nranks && ok; p += 32) {
    uint64_t value = 0;
    ok = wait_for_flag(&signals[p], reached, &value, timeout_ns, error, phase, rank, p);
  }
  return __all_sync(0xffffffffu, ok);
}

// The low-latency signal: waits until signals[p] >> 32 == epoch for every peer.
__device__ __forceinline__ bool wait_for_peers(uint64_t* signals, int nranks, uint32_t epoch,
                                               uint32_t* payload, uint64_t timeout_ns,
                                               DeviceError* error, uint32_t phase, int rank) {
  return wait_for_every_peer(
      signals, nranks, [epoch](uint64_t v) { return static_cast<uint32_t>(v >> 32) == epoch; },
      payload, timeout_ns, error, phase, rank);
}

}  // namespace epc::kernels
