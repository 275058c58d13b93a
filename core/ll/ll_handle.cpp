// SPDX-License-Identifier: Apache-2.0
#include "core/ll/ll_handle.hpp"

#include <cstring>

#include "core/device_guard.hpp"
#include "core/error.hpp"
#include "core/gpu_check.hpp"
#include "core/routing_input.hpp"
#include "core/tensor_check.hpp"
#include "kernels/launch.hpp"

namespace epc {

LlHandle::LlHandle(Group& group, LlSteps& steps, const EpcTensor* topk_idx, cudaStream_t stream)
    : group_(group), steps_(steps), memory_(group.device()) {
  group_.check_healthy();
  const GroupConfig& c = group_.config();
  if (c.mode != EPC_MODE_LOW_LATENCY) {
    fail_argument(
        "the group is in high-throughput mode; low-latency handles need a group "
        "created with EPC_MODE_LOW_LATENCY");
  }
  topk_ = routing_topk(group_, topk_idx);
  max_entries_ = static_cast<int>(c.max_topk);
  const size_t R = static_cast<size_t>(group_.topology().nranks);
  const size_t T = c.max_tokens_per_rank;
  DeviceGuard guard(group_.device());
  const char* what = "cudaMalloc of the handle";
  topk_idx_ = memory_.allocate<int32_t>(T * static_cast<size_t>(topk_), "cudaMalloc of the handle's routing");
  recv_tokens_ = memory_.allocate<int32_t>(R, what);
  msg_entries_ = memory_.allocate<int32_t>(R * T, what);
  msg_rows_ = memory_.allocate<int32_t>(R * T * static_cast<size_t>(max_entries_), what);
  msg_weights_ = memory_.allocate<float>(R * T * static_cast<size_t>(max_entries_), what);
  // A dispatch receive that gives up (a timeout, or a group that a bad routing value has
  // already failed) writes none of the receive state, and a combine queued behind it before
  // the host saw the failure reads it as message counts and row addresses: start from
  // "nothing received" rather than from uninitialised memory.
  const char* zeroing = "zeroing the handle's receive state";
  check_cuda(cudaMemsetAsync(recv_tokens_, 0, R * sizeof(int32_t), stream), zeroing);
  check_cuda(cudaMemsetAsync(msg_entries_, 0, R * T * sizeof(int32_t), stream), zeroing);
  copy_routing(topk_idx, stream);
}

// The arrays go with memory_, once the device is done with them.
LlHandle::~LlHandle() {
  if (steps_.pending_owner() == this) steps_.set_pending_owner(nullptr);
}

void LlHandle::copy_routing(const EpcTensor* topk_idx, cudaStream_t stream) {
  num_tokens_ = epc::copy_routing(group_, topk_idx, topk_, topk_idx_, stream);
}

void LlHandle::update(const EpcTensor* topk_idx, cudaStream_t stream) {
  group_.check_healthy();
  require_no_pending("epc_handle_update", /*starts_step=*/false);
  copy_routing(topk_idx, stream);
}

kernels::LlCommon LlHandle::common() const {
  const GroupConfig& c = group_.config();
  const Plan& plan = group_.plan();
  kernels::LlCommon k;
  std::memset(&k, 0, sizeof k);
  k.dev_comm = group_.dev_comm();
  k.transport = group_.transport();
  k.geo.nranks = group_.topology().nranks;
  k.geo.rank = group_.rank();
  k.geo.local_experts = static_cast<int>(c.local_experts(group_.topology().nranks));
  k.geo.max_tokens = static_cast<int>(c.max_tokens_per_rank);
  k.geo.hidden = static_cast<int>(c.hidden);
  k.geo.row_bytes = static_cast<int>(c.hidden) * 2;
  k.geo.message_bytes = static_cast<int>(plan.message_bytes);
  k.geo.header_bytes = static_cast<int>(ll_message_header_bytes(c));
  k.geo.max_entries = max_entries_;
  k.handle.topk_idx = topk_idx_;
  k.handle.recv_tokens = recv_tokens_;
  k.handle.msg_entries = msg_entries_;
  k.handle.msg_rows = msg_rows_;
  k.handle.msg_weights = msg_weights_;
  k.state = steps_.state();
  k.error = group_.device_error();
  k.timeout_ns = group_.timeout_ns();
  k.num_tokens = num_tokens_;
  k.topk = topk_;
#ifdef EPC_PHASE_TRACE
  k.phase_trace = steps_.phase_trace();
#endif
  return k;
}

int LlHandle::blocks(int items) const {
  // Kernels that hand out one block per token need no more blocks than tokens: fewer idle
  // blocks make small batches cheaper to launch and to finish.
  const int budget = static_cast<int>(group_.config().num_sms);
  return items < 1 ? 1 : (items < budget ? items : budget);
}

void LlHandle::require_no_pending(const char* call, bool starts_step) const {
  if (pending_ != Pending::kNone) {
    fail_argument(
        format("%s: the handle's previous %s was queued with EPC_FLAG_SEND_ONLY; "
               "call epc_complete first",
               call, pending_ == Pending::kDispatch ? "dispatch" : "combine"));
  }
  if (starts_step && steps_.pending_owner() != nullptr) {
    fail_argument(
        format("%s: another handle of this group has a step queued with "
               "EPC_FLAG_SEND_ONLY; call epc_complete on it first",
               call));
  }
}

kernels::LlDispatchParams LlHandle::dispatch_params(const char* call, const EpcTensor* x, const EpcTensor* topk_weights,
                                                    const EpcTensor* out_counts, EpcFlags flags, EpcFlags allowed_flags,
                                                    bool fp8) const {
  group_.check_healthy();
  require_no_pending(call, /*starts_step=*/true);
  if ((flags & ~allowed_flags) != 0) fail_argument(format("%s: unknown flags 0x%x", call, flags & ~allowed_flags));
  const GroupConfig& c = group_.config();
  const int64_t B = num_tokens_, H = c.hidden, K = topk_;
  const int64_t L = c.local_experts(group_.topology().nranks);
  if (fp8) {
    check_tensor(x, {"x", {EPC_DTYPE_BF16, EPC_DTYPE_FP16}, {B, H}});
  } else {
    const EpcDtype token_dtype = c.dtype == EPC_DTYPE_FP16 ? EPC_DTYPE_FP16 : EPC_DTYPE_BF16;
    check_tensor(x, {"x", {token_dtype}, {B, H}});
  }
  check_tensor(topk_weights, {"topk_weights", {EPC_DTYPE_FP32}, {B, K}, 4});
  check_tensor(out_counts, {"out_counts", {EPC_DTYPE_INT32}, {L}, 4});

  kernels::LlDispatchParams p;
  std::memset(&p, 0, sizeof p);
  p.common = common();
  for (int s = 0; s < kernels::kLlSlots; ++s) {
    p.recv_offset[s] = group_.plan().region(EPC_REGION_DISPATCH_RECV, s).offset;
    p.signal_offset[s] = group_.plan().region(EPC_REGION_DISPATCH_SIGNAL, s).offset;
  }
  p.x = x->data;
  p.x_is_fp16 = x->dtype == EPC_DTYPE_FP16;
  p.weights = static_cast<const float*>(topk_weights->data);
  p.out_counts = static_cast<int32_t*>(out_counts->data);
  p.expert_counts = steps_.expert_counts();
  p.payload = fp8 ? kernels::LlPayload::kFp8 : kernels::LlPayload::kHalf;
  p.round_scale_ue8m0 = (flags & EPC_FLAG_FP8_POW2_SCALES) != 0;
  return p;
}

void LlHandle::launch_dispatch(const kernels::LlDispatchParams& p, EpcFlags flags, cudaStream_t stream) {
  DeviceGuard guard(group_.device());
  if ((flags & EPC_FLAG_SEND_ONLY) == 0) {
    check_cuda(kernels::launch_ll_dispatch(p, blocks(num_tokens_), blocks(), stream), "launching the dispatch");
    return;
  }
  check_cuda(kernels::launch_ll_dispatch_send(p, blocks(num_tokens_), stream), "launching the dispatch send");
  pending_ = Pending::kDispatch;
  pending_dispatch_ = p;
  steps_.set_pending_owner(this);
}

void LlHandle::dispatch(const EpcTensor* x, const EpcTensor* topk_weights, const EpcTensor* out_x,
                        const EpcTensor* out_counts, EpcFlags flags, cudaStream_t stream) {
  const GroupConfig& c = group_.config();
  if (c.dtype == EPC_DTYPE_FP8_E4M3) {
    fail_argument(
        "epc_ll_dispatch: the group was created with dtype EPC_DTYPE_FP8_E4M3, so "
        "its buffers hold fp8 rows only; use epc_ll_dispatch_fp8");
  }
  kernels::LlDispatchParams p =
      dispatch_params("epc_ll_dispatch", x, topk_weights, out_counts, flags, EPC_FLAG_SEND_ONLY, false);
  const int64_t L = c.local_experts(group_.topology().nranks);
  const int64_t RT = static_cast<int64_t>(group_.topology().nranks) * c.max_tokens_per_rank;
  check_tensor(out_x, {"out_x", {x->dtype}, {L, RT, static_cast<int64_t>(c.hidden)}});
  p.out_x = out_x->data;
  launch_dispatch(p, flags, stream);
}

void LlHandle::dispatch_fp8(const EpcTensor* x, const EpcTensor* topk_weights, const EpcTensor* out_x,
                            const EpcTensor* out_scales, const EpcTensor* out_counts, EpcFlags flags,
                            cudaStream_t stream) {
  const GroupConfig& c = group_.config();
  if (c.hidden % limits::kFp8BlockChannels != 0) {
    fail_argument(
        format("epc_ll_dispatch_fp8: hidden is %u; fp8 carries one scale per %d "
               "channels, so hidden must be a multiple of %d",
               c.hidden, limits::kFp8BlockChannels, limits::kFp8BlockChannels));
  }
  kernels::LlDispatchParams p = dispatch_params("epc_ll_dispatch_fp8", x, topk_weights, out_counts, flags,
                                                EPC_FLAG_SEND_ONLY | EPC_FLAG_FP8_POW2_SCALES, true);
  const int64_t L = c.local_experts(group_.topology().nranks);
  const int64_t RT = static_cast<int64_t>(group_.topology().nranks) * c.max_tokens_per_rank;
  const int64_t H = c.hidden;
  check_tensor(out_x, {"out_x", {EPC_DTYPE_FP8_E4M3}, {L, RT, H}});
  check_tensor(out_scales, {"out_scales", {EPC_DTYPE_FP32}, {L, RT, H / limits::kFp8BlockChannels}, 4});
  p.out_x = out_x->data;
  p.out_scales = static_cast<float*>(out_scales->data);
  launch_dispatch(p, flags, stream);
}

void LlHandle::combine(const EpcTensor* expert_out, const EpcTensor* out, EpcFlags flags, cudaStream_t stream) {
  group_.check_healthy();
  require_no_pending("epc_ll_combine", /*starts_step=*/true);
  if ((flags & ~EPC_FLAG_SEND_ONLY) != 0) fail_argument(format("unknown flags 0x%x", flags));
  const GroupConfig& c = group_.config();
  const int64_t B = num_tokens_, H = c.hidden;
  const int64_t L = c.local_experts(group_.topology().nranks);
  const int64_t RT = static_cast<int64_t>(group_.topology().nranks) * c.max_tokens_per_rank;
  check_tensor(expert_out, {"expert_out", {EPC_DTYPE_BF16}, {L, RT, H}});
  check_tensor(out, {"out", {EPC_DTYPE_BF16}, {B, H}});

  kernels::LlCombineParams p;
  std::memset(&p, 0, sizeof p);
  p.common = common();
  for (int s = 0; s < kernels::kLlSlots; ++s) {
    p.recv_offset[s] = group_.plan().region(EPC_REGION_COMBINE_RECV, s).offset;
    p.signal_offset[s] = group_.plan().region(EPC_REGION_COMBINE_SIGNAL, s).offset;
  }
  p.expert_out = static_cast<const uint16_t*>(expert_out->data);
  p.out = static_cast<uint16_t*>(out->data);

  DeviceGuard guard(group_.device());
  if ((flags & EPC_FLAG_SEND_ONLY) == 0) {
    check_cuda(kernels::launch_ll_combine(p, blocks(), blocks(num_tokens_), stream), "launching the combine");
    return;
  }
  check_cuda(kernels::launch_ll_combine_send(p, blocks(), stream), "launching the combine send");
  pending_ = Pending::kCombine;
  pending_combine_ = p;
  steps_.set_pending_owner(this);
}

void LlHandle::complete(cudaStream_t stream) {
  group_.check_healthy();
  DeviceGuard guard(group_.device());
  switch (pending_) {
    case Pending::kNone:
      fail_argument(
          "epc_complete: nothing is pending on this handle (no dispatch or combine "
          "was queued with EPC_FLAG_SEND_ONLY)");
    case Pending::kDispatch:
      check_cuda(kernels::launch_ll_dispatch_recv(pending_dispatch_, blocks(), stream),
                 "launching the dispatch receive");
      break;
    case Pending::kCombine:
      check_cuda(kernels::launch_ll_combine_recv(pending_combine_, blocks(num_tokens_), stream),
                 "launching the combine receive");
      break;
  }
  pending_ = Pending::kNone;
  steps_.set_pending_owner(nullptr);
}

}  // namespace epc
