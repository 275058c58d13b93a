// SPDX-License-Identifier: Apache-2.0
// Polling for a value that peers publish, bounded by the group's timeout. The reads go
// through the transport (signal_wait.cuh), so this file only holds the loop and its pace.
#pragma once

#include <cstdint>

#include "kernels/device/deadline.cuh"
#include "kernels/device/flags.cuh"
#include "kernels/device/report.cuh"

namespace epc::kernels {

// A waiting thread rests this long between polls, so many waiting warps leave the memory
// system to the senders; short against a step (docs/tuning.md).
constexpr uint32_t kPollSleepNs = 100;
// Polls between two looks at the deadline and the group's host-memory error word.
constexpr uint32_t kPollsPerCheck = 1024;

// What a timeout records of the last value a wait read (DeviceError::seen): a 64-bit word
// as it is, nothing of other values.
template <typename Value>
__device__ __forceinline__ uint64_t seen_word(const Value&) {
  return 0;
}
__device__ __forceinline__ uint64_t seen_word(const uint64_t& value) { return value; }

// One thread polls `read()` until `reached(value)`; `*value` receives the last value read.
// Returns false on a timeout (recorded as `phase`, waiting `rank`, missing `peer`, with the
// last value read and `wanted`, the epoch a step signal's wait waited for) or when the group
// has failed elsewhere.
template <typename Read, typename Reached, typename Value>
__device__ __forceinline__ bool poll_until(Read read, Reached reached, Value* value, uint64_t timeout_ns,
                                           DeviceError* error, uint32_t phase, int rank, int peer,
                                           uint32_t wanted = 0) {
  Deadline deadline(timeout_ns);
  for (uint32_t spins = 0; !reached(*value = read()); ++spins) {
    // The group's error word lives in host memory: reading it over PCIe at every poll
    // from every waiting block stretches each step (docs/tuning.md), so it and the
    // deadline are checked every kPollsPerCheck polls only (at least kPollsPerCheck *
    // kPollSleepNs apart).
    __nanosleep(kPollSleepNs);
    if (spins % kPollsPerCheck != kPollsPerCheck - 1) continue;
    if (deadline.expired()) {
      report_failure(error, EPC_ERR_TIMEOUT, phase, rank, peer, deadline.elapsed_ns(), seen_word(*value), wanted);
      return false;
    }
    if (group_failed(error)) return false;
  }
  return true;
}

}  // namespace epc::kernels
