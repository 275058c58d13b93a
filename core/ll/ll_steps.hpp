// SPDX-License-Identifier: Apache-2.0
// What the low-latency handles of one group share: the device step state (kernels/wire/
// ll_state.hpp) and the host's record of which receive slot each pending send-only step holds.
// One per low-latency group, created with it.
//
// Slots. A step of one direction (dispatch or combine) uses one of the direction's slots of
// the window: a whole step for the call, a send-only step until its epc_complete (or its
// handle's destroy). The host picks it, round-robin over the slots no pending step holds:
// consecutive steps use different slots, so a step seldom waits for its slot's credits
// (kernels/ll/ll_slot_credit.cuh), and a handle that never completes keeps its one slot while
// the others rotate. Every rank must pick the same slot for the same step; the pick depends
// only on the order of the group's calls (steps, completes, destroys), which every rank makes
// alike (docs/design.md, "Steps in flight").
#pragma once

#include <cstdint>

#include "core/device_memory.hpp"
#include "core/group.hpp"
#include "core/handle_name.hpp"
#include "kernels/wire/limits.hpp"
#include "kernels/wire/ll_state.hpp"
#ifdef EPC_PHASE_TRACE
#include "kernels/wire/ll_phase_trace.hpp"
#endif

namespace epc {

// The two directions, indexing LlSteps' slots and the handle's step records alike.
enum LlDirection : int { kLlDispatch = kernels::kLlDispatchRecord, kLlCombine = kernels::kLlCombineRecord };

class LlSteps;

// A slot taken for a step (LlSteps::take). Unless commit() is called once the step's launch is
// queued, the destructor gives it back: the slot free and the round-robin where it was, so a
// call that fails after taking its slot changes nothing, and every rank's next pick stays the
// one its peers make.
class LlSlotClaim {
 public:
  LlSlotClaim(LlSteps& steps, int direction, int slot, int next_before)
      : steps_(&steps), direction_(direction), slot_(slot), next_before_(next_before) {}
  // Neither copied nor moved: take() returns it as a prvalue, which initializes the caller's.
  LlSlotClaim(const LlSlotClaim&) = delete;
  LlSlotClaim& operator=(const LlSlotClaim&) = delete;
  ~LlSlotClaim();

  int slot() const { return slot_; }
  // The step's launch is queued: the slot stays taken (held until release() when send-only).
  void commit() { steps_ = nullptr; }

 private:
  LlSteps* steps_;  // null once committed
  int direction_;
  int slot_;
  int next_before_;
};

class LlSteps {
 public:
  // Allocates and zeroes the state on the group's device.
  explicit LlSteps(const Group& group);

  kernels::LlState* state() const { return state_; }
  int slots() const { return slots_; }

  // The slot for a step of `direction` on handle `id` (its caller-visible id), held by the
  // step until release() when `send_only`, and given back unless the claim is committed.
  // Throws EPC_ERR_INVALID_USAGE, naming `call` and the handles that hold slots, when a
  // send-only step would exceed max_pending_steps, or when every slot of the direction is
  // held. Changes nothing when it throws.
  LlSlotClaim take(LlDirection direction, HandleName id, bool send_only, const char* call);
  // The send-only step holding `slot` completed (or its handle went away).
  void release(LlDirection direction, int slot);
  // Send-only steps pending over both directions.
  int pending() const;

#ifdef EPC_PHASE_TRACE
  // The ring the LL kernels stamp their phases into (kernels/wire/ll_phase_trace.hpp), zeroed
  // at creation: -Dphase_trace=true builds only.
  kernels::LlPhaseTrace* phase_trace() const { return phase_trace_; }
  // Copies it into `out` (`bytes` must be sizeof(LlPhaseTrace)) once the group's device is
  // idle. Throws EPC_ERR_INVALID_ARGUMENT for a wrong size, EPC_ERR_CUDA when CUDA fails.
  void read_phase_trace(void* out, size_t bytes) const;
#endif

 private:
  friend class LlSlotClaim;

  // "handle 1 (0x..) (dispatch), handle 2 (0x..) (combine)": the holders of every slot.
  std::string holders() const;
  // An uncommitted claim's undoing: `slot` free, the round-robin back at `next`.
  void give_back(int direction, int slot, int next);

  DeviceAllocations memory_;
  kernels::LlState* state_ = nullptr;
#ifdef EPC_PHASE_TRACE
  kernels::LlPhaseTrace* phase_trace_ = nullptr;
#endif
  int slots_ = kernels::kLlMinSlots;
  uint32_t max_pending_ = 0;
  // Per direction: the handle whose send-only step holds each slot (null: free), and where
  // the round-robin search starts.
  HandleName holder_[kernels::kLlStepRecords][kernels::kLlMaxSlots] = {};
  int next_[kernels::kLlStepRecords] = {};
};

}  // namespace epc
