// SPDX-License-Identifier: Apache-2.0
// Per-group device state of the low-latency mode, one LlOpState per direction (dispatch,
// combine). Step numbers live on the device so that a captured CUDA graph advances them at
// every replay: every rank sends the group's steps of one direction in the same order, so the
// numbers agree across ranks without any host involvement. A sending launch takes the next
// number and records it in its handle (LlHandleArrays::steps), where the receiving launch of
// a send-only step finds it; the slot a step uses is the host's choice (core/ll/ll_steps.hpp).
// The "done" counters let the last block of a launch publish the launch's completion; the
// receiving launches of different slots (different handles, perhaps on different streams)
// run at once, so each slot has its own.
#pragma once

#include <cstdint>

#include "kernels/wire/limits.hpp"

namespace epc::kernels {

struct LlOpState {
  uint64_t next_step;                // steps of this direction the group has sent
  uint64_t slot_epoch[kLlMaxSlots];  // step + 1 of the last step sent through each slot; 0: none
  // Step + 1 of the last whole (fused) step, whose launch saw every peer's signal of it
  // (kernels/ll/ll_slot_credit.cuh: an earlier whole step's credits are implied). Written by
  // fused launches only, which are sending launches and so run in order.
  uint64_t received_whole;
  // The credits a whole (fused) step owes: its step + 1 (0: none) and its slot's signal
  // region, given by the direction's next sending launch (ll_slot_credit.cuh).
  uint64_t owed_epoch;
  uint64_t owed_signal_offset;
  uint32_t whole_slots;                // bit s: slot s's last step was a whole (fused) step
  uint32_t send_done;                  // blocks of the current sending launch that finished
  uint32_t receive_done[kLlMaxSlots];  // blocks of the receive-only launch of each slot that finished
};

struct LlState {
  LlOpState dispatch;
  LlOpState combine;
};

// The index of each direction in LlHandleArrays::steps.
constexpr int kLlDispatchRecord = 0;
constexpr int kLlCombineRecord = 1;
constexpr int kLlStepRecords = 2;

}  // namespace epc::kernels
