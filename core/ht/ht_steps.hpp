// SPDX-License-Identifier: Apache-2.0
// What the high-throughput handles of one group share: the device step counters of its
// layout, dispatch and combine (kernels/wire/ht_params.hpp, HtState), and for each of
// dispatch and combine the handle whose send-only step waits for epc_complete. One per
// high-throughput group, created with it.
#pragma once

#include "core/device_memory.hpp"
#include "core/group.hpp"
#include "core/handle_name.hpp"
#include "kernels/wire/ht_params.hpp"

namespace epc {

class HtSteps {
 public:
  // Allocates and zeroes the counters on the group's device.
  explicit HtSteps(const Group& group);

  kernels::HtState* state() const { return state_; }

  // The handle (its caller-visible id) whose send-only dispatch, or combine, is pending, if
  // any. Dispatch and combine have their own slots, flags, acknowledgements and step
  // counters, so one of each may be pending at once, on two handles, where the group's
  // max_pending_steps allows two; a second step of the same operation would reuse the
  // pending step's counter value and slots.
  HandleName pending_owner(bool dispatch) const { return dispatch ? pending_dispatch_ : pending_combine_; }
  void set_pending_owner(bool dispatch, HandleName owner) { (dispatch ? pending_dispatch_ : pending_combine_) = owner; }

 private:
  DeviceAllocations memory_;
  kernels::HtState* state_ = nullptr;
  HandleName pending_dispatch_;
  HandleName pending_combine_;
};

}  // namespace epc
