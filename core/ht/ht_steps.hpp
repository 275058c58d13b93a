// SPDX-License-Identifier: Apache-2.0
// What the high-throughput handles of one group share: the device step counters of its
// layout, dispatch and combine (kernels/wire/ht_params.hpp, HtState). One per
// high-throughput group, created with it.
#pragma once

#include "core/device_memory.hpp"
#include "core/group.hpp"
#include "kernels/wire/ht_params.hpp"

namespace epc {

class HtSteps {
 public:
  // Allocates and zeroes the counters on the group's device.
  explicit HtSteps(const Group& group);

  kernels::HtState* state() const { return state_; }

 private:
  DeviceAllocations memory_;
  kernels::HtState* state_ = nullptr;
};

}  // namespace epc
