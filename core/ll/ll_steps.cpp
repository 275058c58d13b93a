// SPDX-License-Identifier: Apache-2.0
#include "core/ll/ll_steps.hpp"

#include "core/device_guard.hpp"
#include "core/error.hpp"
#include "core/gpu_check.hpp"

namespace epc {

LlSteps::LlSteps(const Group& group) : memory_(group.device()) {
  DeviceGuard guard(group.device());
  state_ = memory_.allocate<kernels::LlState>(1, "cudaMalloc of the step counters");
  check_cuda(cudaMemset(state_, 0, sizeof(kernels::LlState)), "zeroing the step counters");
#ifdef EPC_PHASE_TRACE
  phase_trace_ = memory_.allocate<kernels::LlPhaseTrace>(1, "cudaMalloc of the phase trace");
  check_cuda(cudaMemset(phase_trace_, 0, sizeof(kernels::LlPhaseTrace)), "zeroing the phase trace");
#endif
  check_cuda(cudaDeviceSynchronize(), "zeroing the step counters");
}

#ifdef EPC_PHASE_TRACE
void LlSteps::read_phase_trace(void* out, size_t bytes) const {
  if (bytes != sizeof(kernels::LlPhaseTrace)) {
    fail_argument(format("the phase trace is %zu bytes; out_bytes is %zu", sizeof(kernels::LlPhaseTrace), bytes));
  }
  DeviceGuard guard(memory_.device());
  // The kernels stamp it on whatever streams the caller used: wait for all of them.
  check_cuda(cudaDeviceSynchronize(), "waiting for the kernels before reading the phase trace");
  check_cuda(cudaMemcpy(out, phase_trace_, bytes, cudaMemcpyDeviceToHost), "reading the phase trace");
}
#endif

}  // namespace epc
