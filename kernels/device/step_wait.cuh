// SPDX-License-Identifier: Apache-2.0
// A receive kernel's wait for every peer's signal of the current step. Every block waits for
// itself, its threads splitting the peers, so no block waits behind another block's wait; a
// receive launch has one block per item it handles, few at small batches.
#pragma once

#include <cstdint>

#include "kernels/device/signal_wait.cuh"
#include "kernels/wire/ll_message.hpp"

namespace epc::kernels {

// `signal_offset`: the step's slot's signal region (kernels/wire/ll_message.hpp). Returns true
// in every thread once every peer's step signal but `skipped`'s carries `epoch`; `payload`
// (shared, [nranks], may be null) then holds their low 32 bits (skipped's payload for it),
// and block 0 also copies them to `record` (global, [nranks], may be null). Returns false in
// every thread on a timeout or a failed group (recorded in `error`).
__device__ __forceinline__ bool wait_for_step(const PeerTransport& transport, uint64_t signal_offset, int nranks,
                                              uint32_t epoch, int32_t* record, uint32_t* payload, uint64_t timeout_ns,
                                              DeviceError* error, uint32_t phase, int rank, SkippedPeer skipped = {}) {
  if (nranks == 1 && skipped.rank == 0) {
    // Nothing to wait for (a launch alone in its group): one barrier publishes the payload.
    if (threadIdx.x == 0 && payload != nullptr) {
      payload[0] = skipped.payload;
      if (record != nullptr && blockIdx.x == 0) record[0] = static_cast<int32_t>(skipped.payload);
    }
    __syncthreads();
    return true;
  }
  const bool ok = wait_for_peers_signal(transport, signal_offset + ll_step_signal_offset(0), nranks, epoch, payload,
                                        timeout_ns, error, phase, rank, ll_signal_row_bytes(), skipped);
  if (ok && record != nullptr && payload != nullptr && blockIdx.x == 0) {
    for (int s = threadIdx.x; s < nranks; s += blockDim.x) record[s] = static_cast<int32_t>(payload[s]);
  }
  return ok;
}

}  // namespace epc::kernels
