// SPDX-License-Identifier: Apache-2.0
// A low-latency step's signal: the step's epoch (ll_step_epoch, never 0, so a zeroed window
// never matches) in the high 32 bits and a payload (the messages the sender sent that peer,
// for dispatch) in the low 32,
// stored with release order into this rank's slot of every peer's signal array.
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "kernels/device/line_words.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ll_message.hpp"

namespace epc::kernels {

__device__ __forceinline__ uint32_t step_epoch(uint64_t step) { return ll_step_epoch(step); }
// The epoch of a dispatch signal sent ahead of line records (kernels/ll/ll_dispatch_lines.cuh):
// the step's with kLlLineEpochBit turned (never 0 either), so that no receiver waiting for the
// records' signal takes it for its own, nor the other way round.
__device__ __forceinline__ uint32_t line_step_epoch(uint64_t step) { return step_epoch(step) ^ kLlLineEpochBit; }

// Called by one warp: its lanes signal the peers in parallel (each peer's word is written by
// one lane), so the release stores to R peers overlap instead of following one another.
// `signal_offset`: the window offset of the step's slot's signal region (kernels/wire/ll_message.hpp);
// `epoch`: what the signal carries in its high half (step_epoch, line_step_epoch).
// `payload_of(peer)`: the payload peer gets. `skipped` (-1: none) is not signalled: a fused
// launch's own rank, which does not wait for its own signal (ll_step_kernel.cuh); nor is a
// peer for which `waits(peer)` is false (a combine's peer that got only line records).
// `relaxed` (one node only): the signal is a plain store that orders nothing, for a sender of
// line records (line_words.cuh), which carry their own arrival and follow it.
struct EveryPeerWaits {
  __device__ bool operator()(int) const { return true; }
};
template <typename PayloadOf, typename Waits = EveryPeerWaits>
__device__ __forceinline__ void warp_signal_every_peer(const PeerTransport& transport, uint64_t signal_offset,
                                                       int nranks, int rank, uint32_t epoch, PayloadOf payload_of,
                                                       int skipped = -1, Waits waits = {}, bool relaxed = false) {
  const uint64_t high = static_cast<uint64_t>(epoch) << 32;
  const size_t offset = signal_offset + ll_step_signal_offset(rank);
  for (int peer = static_cast<int>(threadIdx.x % 32); peer < nranks; peer += 32) {
    if (peer == skipped || !waits(peer)) continue;
    const uint64_t value = high | static_cast<uint32_t>(payload_of(peer));
    if (relaxed) {
      store_line_word(static_cast<uint64_t*>(transport.node_peer(offset, peer)), value);
    } else {
      transport.signal(offset, peer, value);
    }
  }
}

}  // namespace epc::kernels
