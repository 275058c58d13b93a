// SPDX-License-Identifier: Apache-2.0
#include "core/ll/ll_steps.hpp"

#include <string>

#include "core/device_guard.hpp"
#include "core/error.hpp"
#include "core/gpu_check.hpp"

namespace epc {

namespace {
const char* direction_name(int direction) { return direction == kLlDispatch ? "dispatch" : "combine"; }
}  // namespace

LlSteps::LlSteps(const Group& group)
    : memory_(group.device()),
      slots_(static_cast<int>(group.plan().num_slots)),
      max_pending_(group.config().max_pending_steps) {
  if (slots_ < kernels::kLlMinSlots || slots_ > kernels::kLlMaxSlots) {
    fail(EPC_ERR_INTERNAL, format("the plan has %d low-latency slots; kernels serve %d to %d", slots_,
                                  kernels::kLlMinSlots, kernels::kLlMaxSlots));
  }
  DeviceGuard guard(group.device());
  state_ = memory_.allocate<kernels::LlState>(1, "cudaMalloc of the step state");
  check_cuda(cudaMemset(state_, 0, sizeof(kernels::LlState)), "zeroing the step state");
#ifdef EPC_PHASE_TRACE
  phase_trace_ = memory_.allocate<kernels::LlPhaseTrace>(1, "cudaMalloc of the phase trace");
  check_cuda(cudaMemset(phase_trace_, 0, sizeof(kernels::LlPhaseTrace)), "zeroing the phase trace");
#endif
  check_cuda(cudaDeviceSynchronize(), "zeroing the step state");
}

int LlSteps::pending() const {
  int n = 0;
  for (const auto& direction : holder_) {
    for (int s = 0; s < slots_; ++s) n += static_cast<bool>(direction[s]);
  }
  return n;
}

std::string LlSteps::holders() const {
  std::string out;
  for (int d = 0; d < kernels::kLlStepRecords; ++d) {
    for (int s = 0; s < slots_; ++s) {
      if (!holder_[d][s]) continue;
      if (!out.empty()) out += ", ";
      out += format("%s (%s)", holder_[d][s].text().c_str(), direction_name(d));
    }
  }
  return out;
}

LlSlotClaim::~LlSlotClaim() {
  if (steps_ != nullptr) steps_->give_back(direction_, slot_, next_before_);
}

void LlSteps::give_back(int direction, int slot, int next) {
  holder_[direction][slot] = HandleName{};
  next_[direction] = next;
}

LlSlotClaim LlSteps::take(LlDirection direction, HandleName id, bool send_only, const char* call) {
  if (send_only && pending() >= static_cast<int>(max_pending_)) {
    fail_usage(
        format("%s on %s: the group allows max_pending_steps = %u send-only steps awaiting "
               "epc_complete, and they are pending on %s; call epc_complete on one of them first",
               call, id.text().c_str(), max_pending_, holders().c_str()));
  }
  const HandleName* held = holder_[direction];
  for (int i = 0; i < slots_; ++i) {
    const int slot = (next_[direction] + i) % slots_;
    if (held[slot]) continue;
    const int next_before = next_[direction];
    next_[direction] = (slot + 1) % slots_;
    if (send_only) holder_[direction][slot] = id;
    return LlSlotClaim(*this, direction, slot, next_before);
  }
  fail_usage(
      format("%s on %s: every %s slot of the group (%d) is held by a pending send-only step, on %s; "
             "call epc_complete on one of them first",
             call, id.text().c_str(), direction_name(direction), slots_, holders().c_str()));
}

void LlSteps::release(LlDirection direction, int slot) { holder_[direction][slot] = HandleName{}; }

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
