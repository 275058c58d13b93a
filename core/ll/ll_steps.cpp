#include "core/ll/ll_steps.hpp"

#include "core/device_guard.hpp"
#include "core/gpu_check.hpp"

namespace epc {

LlSteps::LlSteps(const Group& group) : memory_(group.device()) {
  DeviceGuard guard(group.device());
  const size_t counts = size_t{kernels::kLlSlots} * group.config().num_experts;
  state_ = memory_.allocate<kernels::LlState>(1, "cudaMalloc of the step counters");
  expert_counts_ = memory_.allocate<int32_t>(counts, "cudaMalloc of the per-expert counts");
  check_cuda(cudaMemset(state_, 0, sizeof(kernels::LlState)), "zeroing the step counters");
  check_cuda(cudaMemset(expert_counts_, 0, counts * sizeof(int32_t)), "zeroing the per-expert counts");
  check_cuda(cudaDeviceSynchronize(), "zeroing the step counters");
}

}  // namespace epc
