// SPDX-License-Identifier: Apache-2.0
// A receive kernel's wait for every peer's signal of the current step. Every block waits for
// itself, its threads splitting the peers, so no block waits behind another block's wait; a
// receive launch has one block per item it handles, few at small batches.
#pragma once

#include <cstdint>

#include "kernels/device/signal_wait.cuh"
#include "kernels/wire/ll_message.hpp"

namespace epc::kernels {

// Peer p's signal payload `word` kept: block 0 copies it to `record` (may be null, [2 *
// nranks]); returns its message count.
__device__ __forceinline__ uint32_t keep_step_payload(int32_t* record, int nranks, int p, uint32_t word) {
  if (record != nullptr && blockIdx.x == 0) {
    record[p] = static_cast<int32_t>(ll_payload_messages(word));
    record[nranks + p] = static_cast<int32_t>(ll_payload_tokens(word));
  }
  return ll_payload_messages(word);
}

// A launch alone in its group (one rank, `skipped` itself) waits for nothing: the messages it
// sends itself, its payload's count, which block 0's first thread records; no barrier, so a
// caller that keeps the count in a register starts its work at once.
__device__ __forceinline__ uint32_t alone_step_messages(int32_t* record, SkippedPeer skipped) {
  if (threadIdx.x == 0) return keep_step_payload(record, 1, 0, skipped.payload);
  return ll_payload_messages(skipped.payload);
}

// `signal_offset`: the step's slot's signal region (kernels/wire/ll_message.hpp). Returns true
// in every thread once every peer's step signal but `skipped`'s carries `epoch`; `payload`
// (shared, [nranks], may be null) then holds the messages each sent (ll_payload_messages;
// skipped's from its payload), and block 0 also copies them to `record` (global, [2 * nranks],
// may be null) with each peer's tokens behind them (ll_payload_tokens). Returns false in every
// thread on a timeout or a failed group (recorded in `error`).
__device__ __forceinline__ bool wait_for_step(const PeerTransport& transport, uint64_t signal_offset, int nranks,
                                              uint32_t epoch, int32_t* record, uint32_t* payload, uint64_t timeout_ns,
                                              DeviceError* error, uint32_t phase, int rank, SkippedPeer skipped = {}) {
  const auto keep = [&](int p, uint64_t value) {
    return keep_step_payload(record, nranks, p, static_cast<uint32_t>(value));
  };
  if (nranks == 1 && skipped.rank == 0) {
    // Nothing to wait for: one rank that sent itself nothing through the window. A launch alone
    // keeps its count in a register instead (alone_step_messages); this path keeps the wait
    // correct for any other caller on one rank, with one barrier to publish the payload.
    if (threadIdx.x == 0 && payload != nullptr) payload[0] = keep(0, skipped.payload);
    __syncthreads();
    return true;
  }
  return wait_for_peers_signal(transport, signal_offset + ll_step_signal_offset(0), nranks, epoch, payload, timeout_ns,
                               error, phase, rank, ll_signal_row_bytes(), skipped, keep);
}

}  // namespace epc::kernels
