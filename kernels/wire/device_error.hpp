// SPDX-License-Identifier: Apache-2.0
// The record through which kernels report a failure to the host. It lives in pinned,
// device-mapped host memory, so the host can read it without a stream synchronisation and
// a kernel that gives up can still say why.
#pragma once

#include <cstdint>

namespace epc::kernels {

// Which part of the protocol was waiting when a timeout fired.
enum Phase : uint32_t {
  kPhaseNone = 0,
  kPhaseGroupBarrier = 1,
  kPhaseDispatchReceive = 2,  // waiting for a peer's low-latency dispatch tokens
  kPhaseCombineReceive = 3,   // waiting for a peer's low-latency combine partials
  kPhaseRouting = 4,          // a routing value was outside [-1, num_experts)
  kPhaseHtLayout = 5,         // waiting for a peer's high-throughput counts
  kPhaseHtDispatch = 6,       // waiting for a peer's high-throughput rows or acknowledgement
  kPhaseHtCombine = 7,
  kPhaseLlDispatchSlot = 8,  // waiting for a peer to free a low-latency dispatch slot (its credit)
  kPhaseLlCombineSlot = 9,   // the same for a combine slot
  kPhaseHtRingSpace = 10,    // waiting for a ring's reader to free a slot (its credit; kernels/ht/ht_ring.cuh)
  kPhaseHtRingData = 11,     // waiting for a ring's writer to publish a slot; with EPC_ERR_INTERNAL,
                             // a published slot that was not the one expected
};

// How a failure message names the phase.
inline const char* phase_name(uint32_t phase) {
  switch (phase) {
    case kPhaseNone:
      return "none";
    case kPhaseGroupBarrier:
      return "group barrier";
    case kPhaseDispatchReceive:
      return "low-latency dispatch receive";
    case kPhaseCombineReceive:
      return "low-latency combine receive";
    case kPhaseRouting:
      return "routing check";
    case kPhaseHtLayout:
      return "high-throughput layout (count exchange)";
    case kPhaseHtDispatch:
      return "high-throughput dispatch";
    case kPhaseHtCombine:
      return "high-throughput combine";
    case kPhaseLlDispatchSlot:
      return "low-latency dispatch slot reuse (a peer has not freed the slot's previous step)";
    case kPhaseLlCombineSlot:
      return "low-latency combine slot reuse (a peer has not freed the slot's previous step)";
    case kPhaseHtRingSpace:
      return "high-throughput ring space (the reader has not freed a slot)";
    case kPhaseHtRingData:
      return "high-throughput ring data (the writer has not published the next slot)";
    default:
      return "unknown phase";
  }
}

struct DeviceError {
  uint32_t status;     // 0 or an EpcStatus; the first kernel to fail sets it, once, last
  uint32_t phase;      // a Phase
  int32_t rank;        // world rank that was waiting
  int32_t peer;        // world rank it waited for
  uint64_t waited_ns;  // how long it waited before giving up
  // A wait for a step signal: the last word it read and the epoch it waited for in the word's
  // high half, so that the host can tell a peer that never came from one that moved the step
  // the other way (ll_signal_of_other_kind); `wanted` 0 for other waits.
  uint64_t seen;
  uint32_t wanted;
  uint32_t reserved;
  // A word in device memory that the first failing thread takes with an atomic exchange:
  // atomics on this record itself would be system-scope atomics on host memory over PCIe,
  // which the GPU does not support (compute-sanitizer memcheck reports them).
  uint32_t* claim;
};

}  // namespace epc::kernels
