// SPDX-License-Identifier: Apache-2.0
// Slot credits: when a low-latency receive slot may be written again. The host picks the slot
// of each step (core/ll/ll_steps.hpp); the slot's previous step t may still be read by a slower
// rank, so before any store into the slot a sending launch makes sure every destination has
// finished reading it. A destination says so with a credit: t + 1 stored into its credit word
// of the source's copy of the slot's signal region (kernels/wire/ll_message.hpp), one lane per
// source, a release store or the network's signal; each word has one writer and only grows.
//
//  - A receive-only launch (epc_complete) gives the credits of its step when all its blocks
//    have read the slot (its last block, after a system-scope fence).
//  - A whole (fused) step's receive part gives none at its end (no grid-wide count on the
//    fast path): the direction's next sending launch on this rank, which runs after it
//    (each direction's sends run in order on the device), gives them (LlOpState::owed_epoch):
//    block 0 first thing when that launch must wait for credits itself, else a second warp of
//    its last sending block beside the warp that signals, off the step's critical path (a
//    launch alone in its group, which neither waits nor counts, in block 0's second warp at
//    its end: ll_step_kernel.cuh). Every
//    rank decides alike (the decision depends on the group's step sequence only), so no rank
//    waits for a credit its peer gives late.
//  - A sender needs no credit when the slot's previous step t was a whole step and this rank
//    has received a later whole step u > t (LlOpState::received_whole): each peer gave t's
//    credit at the start of its first send after t, before its signal of u (the same launch,
//    ordered by its last-block count, or a later one), so its reads of t happened before that
//    signal, which this rank acquired in u's launch, which ran before this one. That is the
//    steady state of whole steps alternating between two slots: the same loads as the step
//    number's, no barrier, no wait.
//  - Otherwise every block waits for every destination's credit, bounded by the group's
//    timeout (phase kPhaseLl*Slot naming the destination).
#pragma once

#include <cstdint>

#include <cuda/atomic>

#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ll_message.hpp"
#include "kernels/wire/ll_params.hpp"
#include "kernels/wire/ll_state.hpp"

namespace epc::kernels {

// Called by one warp, once every read of this rank's copy of the slot for step `step` is
// ordered before it: every source may write the slot again.
__device__ __forceinline__ void warp_give_slot_credits(const PeerTransport& transport, uint64_t signal_offset,
                                                       int nranks, int rank, uint64_t step) {
  const uint64_t offset = signal_offset + ll_credit_offset(rank);
  for (int peer = lane_id(); peer < nranks; peer += kWarpSize) transport.signal(offset, peer, step + 1);
}

// The credits a whole step owes, given by one warp of the direction's next sending launch. That
// launch runs after the whole step's (each direction's sends run in order on the device), so
// the step's reads are done: inside the node a relaxed store is enough, and costs no fence at
// the start of the launch; across nodes the network's signal.
__device__ __forceinline__ void warp_give_owed_credits(const PeerTransport& transport, uint64_t signal_offset,
                                                       int nranks, int rank, uint64_t step) {
  const uint64_t offset = signal_offset + ll_credit_offset(rank);
  for (int peer = lane_id(); peer < nranks; peer += kWarpSize) {
    if (transport.in_node(peer)) {
      cuda::atomic_ref<uint64_t, cuda::thread_scope_system> word(
          *static_cast<uint64_t*>(transport.buffer(offset, peer)));
      word.store(step + 1, cuda::memory_order_relaxed);
    } else {
      transport.signal(offset, peer, step + 1);
    }
  }
}

// Whether `slot` needs no credits: never used, or its previous step was a whole step and a
// later whole step was received. Read from state that sending launches alone write, which
// run in order: stable while a sending launch runs, the same in every thread and block.
// The three words are loaded before any is tested, so that a launch's start waits for one
// memory round trip, not one per word.
__device__ __forceinline__ bool slot_known_free(const LlOpState* op, int slot) {
  const uint64_t previous = op->slot_epoch[slot];
  const uint32_t whole_slots = op->whole_slots;
  const uint64_t received_whole = op->received_whole;
  return previous == 0 || (((whole_slots >> slot) & 1u) != 0 && received_whole > previous);
}

// The owed credits of one warp, from the state before this launch records its own step.
__device__ __forceinline__ void warp_give_owed(const LlCommon& c, const LlOpState* op) {
  const uint64_t owed = op->owed_epoch;
  const uint64_t owed_offset = op->owed_signal_offset;
  if (owed != 0) warp_give_owed_credits(c.transport, owed_offset, c.geo.nranks, c.geo.rank, owed - 1);
}

// Called by the second warp of a sending launch's last block while the first signals, before
// the step is recorded: the owed credits, when claim_slot did not give them.
__device__ __forceinline__ void warp_give_owed_late(const LlCommon& c, const LlOpState* op, int slot) {
  if (slot_known_free(op, slot)) warp_give_owed(c, op);
}

// Called by every thread of every block of a sending launch before any store into the slot,
// with the step's slot and its signal region. When the launch must wait, block 0 first gives
// the credits a previous whole step owes. True in every thread once every destination has
// freed the slot's previous step; false on a timeout (recorded in the group's error record
// with `phase` and the destination) or a group failed elsewhere.
__device__ __forceinline__ bool claim_slot(const LlCommon& c, LlOpState* op, int slot, uint64_t signal_offset,
                                           uint32_t phase) {
  if (slot_known_free(op, slot)) return true;  // uniform over the block
  if (threadIdx.x < kWarpSize && blockIdx.x == 0) warp_give_owed(c, op);
  const uint64_t previous = op->slot_epoch[slot];
  __shared__ int freed;
  if (threadIdx.x < kWarpSize) {
    const bool ok = warp_wait_for_every_peer_signal(c.transport, signal_offset + ll_credit_offset(0), c.geo.nranks,
                                                    AtLeast{previous}, c.timeout_ns, c.error, phase, c.dev_comm.rank,
                                                    ll_signal_row_bytes());
    if (threadIdx.x == 0) freed = ok ? 1 : 0;
  }
  __syncthreads();
  return freed != 0;
}

// Called by one thread of a fused launch's block that has seen every peer's signal of `step`;
// read by the direction's later sending launches, which run after this one.
__device__ __forceinline__ void note_whole_received(LlOpState* op, uint64_t step) { op->received_whole = step + 1; }

}  // namespace epc::kernels
