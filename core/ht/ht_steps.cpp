// SPDX-License-Identifier: Apache-2.0
#include "core/ht/ht_steps.hpp"

#include "core/device_guard.hpp"
#include "core/gpu_check.hpp"

namespace epc {

HtSteps::HtSteps(const Group& group) : memory_(group.device()) {
  DeviceGuard guard(group.device());
  state_ = memory_.allocate<kernels::HtState>(1, "cudaMalloc of the high-throughput step counters");
  check_cuda(cudaMemset(state_, 0, sizeof(kernels::HtState)), "zeroing the step counters");
  check_cuda(cudaDeviceSynchronize(), "zeroing the step counters");
}

}  // namespace epc
