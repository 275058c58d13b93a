// SPDX-License-Identifier: Apache-2.0
// What the low-latency handles of one group share: the device step counters that pick each
// step's double-buffer slot and epoch (kernels/wire/ll_state.hpp), and the handle whose
// EPC_STEP_SEND_ONLY step is waiting for epc_complete. One per low-latency group, created with it.
#pragma once

#include <cstdint>

#include "core/device_memory.hpp"
#include "core/group.hpp"
#include "kernels/wire/ll_state.hpp"
#ifdef EPC_PHASE_TRACE
#include "kernels/wire/ll_phase_trace.hpp"
#endif

namespace epc {

class LlSteps {
 public:
  // Allocates and zeroes the state on the group's device.
  explicit LlSteps(const Group& group);

  kernels::LlState* state() const { return state_; }

  // The handle (its caller-visible id) whose send-only step is pending, if any: a step's
  // slot and epoch come from the group's step counters, so no other step of the group may
  // start before it completes.
  const void* pending_owner() const { return pending_owner_; }
  void set_pending_owner(const void* owner) { pending_owner_ = owner; }

#ifdef EPC_PHASE_TRACE
  // The ring the LL kernels stamp their phases into (kernels/wire/ll_phase_trace.hpp), zeroed
  // at creation: -Dphase_trace=true builds only.
  kernels::LlPhaseTrace* phase_trace() const { return phase_trace_; }
  // Copies it into `out` (`bytes` must be sizeof(LlPhaseTrace)) once the group's device is
  // idle. Throws EPC_ERR_INVALID_ARGUMENT for a wrong size, EPC_ERR_CUDA when CUDA fails.
  void read_phase_trace(void* out, size_t bytes) const;
#endif

 private:
  DeviceAllocations memory_;
  kernels::LlState* state_ = nullptr;
#ifdef EPC_PHASE_TRACE
  kernels::LlPhaseTrace* phase_trace_ = nullptr;
#endif
  const void* pending_owner_ = nullptr;
};

}  // namespace epc
