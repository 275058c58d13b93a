// SPDX-License-Identifier: Apache-2.0
#include "core/ll/ll_handle.hpp"

#include <cstring>

#include "core/device_guard.hpp"
#include "core/error.hpp"
#include "core/gpu_check.hpp"
#include "core/handle_memory.hpp"
#include "core/ll/ll_outputs.hpp"
#include "core/passthrough.hpp"
#include "core/routing_input.hpp"
#include "core/scale_output.hpp"
#include "core/tensor_check.hpp"
#include "kernels/launch.hpp"

namespace epc {

LlHandle::LlHandle(Group& group, LlSteps& steps, const HandleSetup& setup, HandleName id, const EpcTensor* topk_idx,
                   cudaStream_t stream)
    : group_(group), steps_(steps), setup_(setup), id_(id), memory_(group.device()) {
  group_.check_healthy();
  const GroupConfig& c = group_.config();
  const int topk = topk_idx != nullptr ? routing_topk(group_, topk_idx) : 0;
  max_entries_ = static_cast<int>(c.max_topk);
  const LlHandleSizes n = ll_handle_sizes(c, group_.topology().nranks);
  DeviceGuard guard(group_.device());
  const char* what = "cudaMalloc of the handle";
  topk_idx_ = memory_.allocate<int32_t>(n.topk_idx, "cudaMalloc of the handle's routing");
  recv_tokens_ = memory_.allocate<int32_t>(n.recv_tokens, what);
  msg_slot_ = memory_.allocate<int32_t>(n.msg_slot, what);
  msg_entries_ = memory_.allocate<int32_t>(n.msg_entries, what);
  msg_rows_ = memory_.allocate<int32_t>(n.msg_rows, what);
  msg_weights_ = memory_.allocate<float>(n.msg_weights, what);
  counts_ = memory_.allocate<int32_t>(n.counts, what);
  expert_entries_ = memory_.allocate<int32_t>(n.expert_entries, what);
  entry_positions_ = memory_.allocate<int32_t>(n.entry_positions, what);
  token_places_ = memory_.allocate<int32_t>(n.token_places, what);
  rank_tokens_ = memory_.allocate<int32_t>(n.rank_tokens, what);
  steps_record_ = memory_.allocate<uint64_t>(n.steps, what);
  // A dispatch receive that gives up (a timeout, or a group that a bad routing value has
  // already failed) writes none of the receive state, and a combine queued behind it before
  // the host saw the failure reads it as message counts and row addresses: start from
  // "nothing received" rather than from uninitialised memory.
  const char* zeroing = "zeroing the handle's receive state";
  check_cuda(cudaMemsetAsync(recv_tokens_, 0, n.recv_tokens * sizeof(int32_t), stream), zeroing);
  check_cuda(cudaMemsetAsync(msg_slot_, 0, n.msg_slot * sizeof(int32_t), stream), zeroing);
  check_cuda(cudaMemsetAsync(msg_entries_, 0, n.msg_entries * sizeof(int32_t), stream), zeroing);
  // Combine loads every entry slot of a message with its count; slots past it hold zeros.
  check_cuda(cudaMemsetAsync(msg_rows_, 0, n.msg_rows * sizeof(int32_t), stream), zeroing);
  check_cuda(cudaMemsetAsync(msg_weights_, 0, n.msg_weights * sizeof(float), stream), zeroing);
  check_cuda(cudaMemsetAsync(steps_record_, 0, n.steps * sizeof(uint64_t), stream), zeroing);
  if (topk_idx != nullptr) {
    topk_ = topk;
    copy_routing(topk_idx, stream);
  }
}

// The arrays go with memory_, once the device is done with them. A pending step gives up its
// slot: this rank will never read it for that step, so the slot's credits go to every source
// as its receive would have given them (kernels/ll/ll_slot_release.cu). The sending launch
// must have recorded the slot's step first, hence the wait; on a failed group nothing is sent
// (no step of it runs again).
LlHandle::~LlHandle() {
  if (pending_ == EPC_PENDING_NONE) return;
  const LlDirection direction = pending_ == EPC_PENDING_DISPATCH ? kLlDispatch : kLlCombine;
  steps_.release(direction, pending_slot_);
  try {
    group_.check_async_error();
    DeviceGuard guard(group_.device());
    if (cudaDeviceSynchronize() != cudaSuccess) return;
    kernels::LlSlotReleaseParams p;
    std::memset(&p, 0, sizeof p);
    p.transport = group_.transport();
    p.op = direction == kLlDispatch ? &steps_.state()->dispatch : &steps_.state()->combine;
    p.signal_offset = direction == kLlDispatch ? pending_dispatch_.signal_offset : pending_combine_.signal_offset;
    p.slot = pending_slot_;
    p.nranks = group_.topology().nranks;
    p.rank = group_.rank();
    if (kernels::launch_ll_slot_release(p, nullptr) == cudaSuccess) (void)cudaDeviceSynchronize();
  } catch (...) {
    // A failed group: its steps are refused from now on, so nothing waits for the slot.
  }
}

void LlHandle::copy_routing(const EpcTensor* topk_idx, cudaStream_t stream) {
  num_tokens_ = epc::copy_routing(group_, topk_idx, topk_, topk_idx_, stream,
                                  ExpertRouting{expert_entries_, entry_positions_, token_places_, rank_tokens_});
}

void LlHandle::update(const EpcTensor* topk_idx, cudaStream_t stream) {
  group_.check_healthy();
  require_ready("epc_handle_update", /*starts_step=*/false);
  const int topk = routing_topk(group_, topk_idx, topk_);
  const int previous = topk_;
  topk_ = topk;
  try {
    copy_routing(topk_idx, stream);
  } catch (...) {
    topk_ = previous;  // a failing call changes nothing
    throw;
  }
  dispatched_ = false;
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
  k.geo.combine_record_bytes = static_cast<int>(ll_combine_record_bytes(c));
  k.geo.line_tokens = static_cast<int>(plan.ll_line_tokens);
  k.geo.dispatch_line_tokens = kernels::ll_dispatch_line_steps(k.geo.line_tokens, plan.message_bytes);
  k.geo.expert_rank_multiplier =
      kernels::quotient_multiplier(k.geo.local_experts, int64_t{k.geo.nranks} * k.geo.local_experts);
  k.geo.slot_source_multiplier =
      kernels::quotient_multiplier(k.geo.max_tokens, int64_t{k.geo.nranks} * k.geo.max_tokens);
  k.handle.topk_idx = topk_idx_;
  k.handle.recv_tokens = recv_tokens_;
  k.handle.msg_slot = msg_slot_;
  k.handle.msg_entries = msg_entries_;
  k.handle.msg_rows = msg_rows_;
  k.handle.msg_weights = msg_weights_;
  k.handle.expert_entries = expert_entries_;
  k.handle.entry_positions = entry_positions_;
  k.handle.token_places = token_places_;
  k.handle.rank_tokens = rank_tokens_;
  k.handle.steps = steps_record_;
  k.state = steps_.state();
  k.error = group_.device_error();
  k.timeout_ns = group_.timeout_ns();
  k.num_tokens = num_tokens_;
  k.step_tokens = k.geo.max_tokens;
  k.topk = topk_;
  k.layout = setup_.layout == EPC_LAYOUT_RANK_MAJOR ? kernels::LlLayout::kRankMajor
             : setup_.layout == EPC_LAYOUT_FLAT     ? kernels::LlLayout::kFlat
                                                    : kernels::LlLayout::kExpertPadded;
#ifdef EPC_PHASE_TRACE
  k.phase_trace = steps_.phase_trace();
#endif
  return k;
}

int LlHandle::blocks(int items, int per_sm) const {
  // Kernels that hand out one block per token need no more blocks than tokens: fewer idle
  // blocks make small batches cheaper to launch and to finish.
  const int budget = static_cast<int>(group_.config().num_sms) * per_sm;
  return items < 1 ? 1 : (items < budget ? items : budget);
}

LlShape LlHandle::shape() const {
  const GroupConfig& c = group_.config();
  LlShape s;
  s.ranks = group_.topology().nranks;
  s.max_tokens = c.max_tokens_per_rank;
  s.hidden = c.hidden;
  s.local_experts = c.local_experts(group_.topology().nranks);
  s.tokens = num_tokens_;
  s.topk = topk_;
  return s;
}

int LlHandle::capped(int blocks, int budget) { return blocks < budget ? blocks : budget; }

int LlHandle::slices_for(int items, int per_sm) const {
  // A power of two (kernels::is_slice_count: the kernels split item numbers by shifts).
  return kernels::ll_slice_count(static_cast<int>(group_.config().num_sms) * per_sm, items);
}

int LlHandle::message_slices(int per_sm) const { return slices_for(group_.topology().nranks * num_tokens_, per_sm); }

int LlHandle::token_blocks(int per_sm) const { return blocks(num_tokens_ * slices_for(num_tokens_, per_sm), per_sm); }

int LlHandle::message_blocks(int per_sm) const {
  // One block per (message, slice), and the loops stride over the grid, so any count is
  // correct; the messages of a step are unknown on the host, so size for a batch of this
  // rank's size from every rank (decode batches are alike across ranks).
  return blocks(group_.topology().nranks * num_tokens_ * message_slices(per_sm), per_sm);
}

void LlHandle::require_ready(const char* call, bool starts_step) const {
  if (pending_ != EPC_PENDING_NONE) {
    fail_usage(format("%s: %s has a send-only %s pending; call epc_complete on it first", call, id_.text().c_str(),
                      pending_ == EPC_PENDING_DISPATCH ? "dispatch" : "combine"));
  }
  if (starts_step && topk_ == 0) {
    fail_usage(format("%s: %s has no routing yet; call epc_handle_update first", call, id_.text().c_str()));
  }
}

void LlHandle::dispatch(const EpcDispatchArgs& a, cudaStream_t stream) {
  group_.check_healthy();
  require_ready("epc_dispatch", /*starts_step=*/true);
  const GroupConfig& c = group_.config();
  const int64_t B = num_tokens_, H = c.hidden;
  const int64_t L = c.local_experts(group_.topology().nranks);
  const bool fp8 = a.quant == EPC_QUANT_FP8;
  const bool passthrough = a.quant == EPC_QUANT_PASSTHROUGH;
  PassthroughPayload caller{};
  if (passthrough) {
    caller = check_passthrough_inputs(a, B, H);
    check_ll_passthrough_fits(caller, c.max_token_bytes());
  }
  if (fp8 && c.hidden % limits::kFp8BlockChannels != 0) {
    fail_argument(
        format("EpcDispatchArgs.quant is EPC_QUANT_FP8, which carries one scale per %d channels, but "
               "hidden is %u",
               limits::kFp8BlockChannels, c.hidden));
  }
  if (a.quant == EPC_QUANT_NONE && c.dtype == EPC_DTYPE_FP8_E4M3) {
    fail_argument(
        format("EpcDispatchArgs.quant is EPC_QUANT_NONE, but the group's max_token_bytes (%u) holds fp8 "
               "rows only; use EPC_QUANT_FP8",
               c.max_token_bytes()));
  }
  if (!passthrough) check_tensor(a.x, {"EpcDispatchArgs.x", {EPC_DTYPE_BF16, EPC_DTYPE_FP16}, {B, H}});
  const bool padded = setup_.layout == EPC_LAYOUT_EXPERT_PADDED;
  const LlOutputs out = check_ll_dispatch_outputs(a, setup_, shape(), passthrough ? &caller : nullptr);
  const CountOutputs counts = check_count_outputs(a, L);
  const int budget = resolve_send_sms(a.send_sms, c.num_sms, group_.device_sms(), "EpcDispatchArgs.send_sms");
  const int step_tokens = resolve_max_step_tokens(a.max_step_tokens, B, c.max_tokens_per_rank);
  const bool send_only = (a.flags & EPC_STEP_SEND_ONLY) != 0;
  const int per_sm =
      kernels::ll_alone_blocks_per_sm(group_.topology().nranks, !send_only, budget, group_.device_sms(), num_tokens_);

  kernels::LlDispatchParams p;
  std::memset(&p, 0, sizeof p);
  p.common = common();
  p.common.step_tokens = step_tokens;
  p.x = a.x->data;
  p.x_is_fp16 = a.x->dtype == EPC_DTYPE_FP16;
  p.x_row_bytes = passthrough ? static_cast<int>(caller.row) : static_cast<int>(H) * 2;
  p.payload_row_bytes = passthrough ? p.x_row_bytes : fp8 ? static_cast<int>(H) : static_cast<int>(H) * 2;
  if (passthrough) {
    p.x_scales = a.x_scales->data;
    p.scale_count = static_cast<int>(caller.scale_count);
    p.scale_bytes = static_cast<int>(caller.scale_bytes);
  } else if (fp8) {
    p.scale_count = static_cast<int>(H / limits::kFp8BlockChannels);
    p.scale_bytes = p.scale_count * static_cast<int>(sizeof(float));
  }
  // EXPERT_PADDED: the weights a SENDER combine applies, recorded with each row (0 without).
  const bool weighted = a.topk_weights != nullptr && (padded || a.out_topk_weights != nullptr);
  p.weights = weighted ? static_cast<const float*>(a.topk_weights->data) : nullptr;
  p.out_x = a.out_x->data;
  p.out_scales = out.scales;  // data null without scales
  p.out_counts = a.out_expert_counts != nullptr ? static_cast<int32_t*>(a.out_expert_counts->data) : counts_;
  p.out_topk_idx = out.topk_idx;
  p.out_topk_weights = out.topk_weights;
  p.out_rank_counts = out.rank_counts;
  p.out_num_recv = out.num_recv;
  p.global_expert_ids = (setup_.flags & EPC_HANDLE_GLOBAL_EXPERT_IDS) != 0;
  p.acc_counts = counts.accumulated;
  p.message_slices = message_slices(per_sm);
  p.token_slices = slices_for(num_tokens_, per_sm);
  p.blocks_per_sm = per_sm;
  p.payload = passthrough ? kernels::LlPayload::kPassthrough
              : fp8       ? kernels::LlPayload::kFp8
                          : kernels::LlPayload::kHalf;
  // A UE8M0 encoding holds powers of two only: the cast rounds every scale up to one.
  p.round_scale_ue8m0 =
      (a.flags & EPC_DISPATCH_POW2_SCALES) != 0 || (fp8 && p.out_scales.encoding != kernels::ScaleEncoding::kFp32);

  DeviceGuard guard(group_.device());
  LlSlotClaim claim = steps_.take(kLlDispatch, id_, send_only, "epc_dispatch");
  p.slot = claim.slot();
  p.recv_offset = group_.plan().region(EPC_REGION_DISPATCH_RECV, static_cast<uint32_t>(p.slot)).offset;
  p.signal_offset = group_.plan().region(EPC_REGION_DISPATCH_SIGNAL, static_cast<uint32_t>(p.slot)).offset;
  if (!send_only) {
    check_cuda(kernels::launch_ll_dispatch(p, capped(token_blocks(per_sm), budget * per_sm),
                                           capped(message_blocks(per_sm), budget * per_sm), stream),
               "launching the dispatch");
  } else {
    check_cuda(kernels::launch_ll_dispatch_send(p, capped(token_blocks(), budget), stream),
               "launching the dispatch send");
  }
  // The step is queued on every rank that got here: the handle's state says so before the
  // host copy of the counts, which can still fail.
  claim.commit();
  dispatched_ = true;
  dispatched_unweighted_ = padded && !weighted;
  if (!send_only) {
    copy_counts_to_host(counts, p.out_counts, L, stream);
    return;
  }
  pending_ = EPC_PENDING_DISPATCH;
  pending_slot_ = p.slot;
  pending_dispatch_ = p;
  pending_counts_ = counts;
}

void LlHandle::combine(const EpcCombineArgs& a, cudaStream_t stream) {
  group_.check_healthy();
  require_ready("epc_combine", /*starts_step=*/true);
  const GroupConfig& c = group_.config();
  if (!dispatched_) {
    // The combine walks what the last dispatch received, which a new routing no longer
    // describes. Checked before the arguments, as on HT: what that dispatch carried (its
    // weights) says nothing about the next one.
    fail_usage(
        format("epc_combine: %s has not dispatched since its last routing (epc_handle_create or "
               "epc_handle_update); call epc_dispatch first",
               id_.text().c_str()));
  }
  const EpcWeighting weighting = resolve_ll_weighting(a.weighting, setup_.layout, c.flags);
  const bool home = weighting == EPC_WEIGHTING_HOME;
  if (weighting == EPC_WEIGHTING_SENDER && dispatched_unweighted_) {
    fail_argument(
        "EpcCombineArgs.weighting is EPC_WEIGHTING_SENDER (the default for EPC_LAYOUT_EXPERT_PADDED), but the "
        "handle's last dispatch had no topk_weights; pass them to epc_dispatch, or combine with "
        "EPC_WEIGHTING_HOME and home_topk_weights");
  }
  require_unserved(a.topk_weights, "EpcCombineArgs.topk_weights", "weights carried back on low-latency groups");
  const int64_t B = num_tokens_, H = c.hidden;
  if (a.x->dtype == EPC_DTYPE_FP16) {
    fail_unsupported(format("EpcCombineArgs.x of dtype fp16 is not served in ABI %d.%d; bf16 travels", EPC_ABI_MAJOR,
                            EPC_ABI_MINOR));
  }
  check_ll_rows_tensor(a.x, "EpcCombineArgs.x", EPC_DTYPE_BF16, setup_, shape());
  check_tensor(a.out, {"EpcCombineArgs.out", {EPC_DTYPE_BF16, EPC_DTYPE_FP16, EPC_DTYPE_FP32}, {B, H}});
  if (tensors_overlap(a.x, a.out)) fail_argument("EpcCombineArgs.x and out overlap; combine cannot work in place");
  if (home) check_tensor(a.home_topk_weights, {"EpcCombineArgs.home_topk_weights", {EPC_DTYPE_FP32}, {B, topk_}, 4});
  const int budget = resolve_send_sms(a.send_sms, c.num_sms, group_.device_sms(), "EpcCombineArgs.send_sms");
  const bool send_only = (a.flags & EPC_STEP_SEND_ONLY) != 0;
  const int per_sm =
      kernels::ll_alone_blocks_per_sm(group_.topology().nranks, !send_only, budget, group_.device_sms(), num_tokens_);

  kernels::LlCombineParams p;
  std::memset(&p, 0, sizeof p);
  p.common = common();
  p.expert_out = static_cast<const uint16_t*>(a.x->data);
  p.out = a.out->data;
  p.out_type = sum_output_of(a.out->dtype);
  p.message_slices = message_slices(per_sm);
  p.token_slices = slices_for(num_tokens_, per_sm);
  p.blocks_per_sm = per_sm;
  // Every entry's row returns unweighted into the per-entry combine slots (kernels/wire/ll_message.hpp).
  if (home) p.home_weights = static_cast<const float*>(a.home_topk_weights->data);

  DeviceGuard guard(group_.device());
  LlSlotClaim claim = steps_.take(kLlCombine, id_, send_only, "epc_combine");
  p.slot = claim.slot();
  p.recv_offset = group_.plan().region(EPC_REGION_COMBINE_RECV, static_cast<uint32_t>(p.slot)).offset;
  p.signal_offset = group_.plan().region(EPC_REGION_COMBINE_SIGNAL, static_cast<uint32_t>(p.slot)).offset;
  if (!send_only) {
    check_cuda(kernels::launch_ll_combine(p, capped(message_blocks(per_sm), budget * per_sm),
                                          capped(token_blocks(per_sm), budget * per_sm), stream),
               "launching the combine");
    claim.commit();
    return;
  }
  check_cuda(kernels::launch_ll_combine_send(p, capped(message_blocks(), budget), stream),
             "launching the combine send");
  claim.commit();
  pending_ = EPC_PENDING_COMBINE;
  pending_slot_ = p.slot;
  pending_combine_ = p;
}

void LlHandle::complete(cudaStream_t stream) {
  group_.check_healthy();
  if (pending_ == EPC_PENDING_NONE) {
    fail_usage(
        format("epc_complete: %s has nothing pending (no dispatch or combine was queued with "
               "EPC_STEP_SEND_ONLY)",
               id_.text().c_str()));
  }
  DeviceGuard guard(group_.device());
  const bool dispatch = pending_ == EPC_PENDING_DISPATCH;
  if (dispatch) {
    check_cuda(kernels::launch_ll_dispatch_recv(pending_dispatch_, message_blocks(), stream),
               "launching the dispatch receive");
  } else {
    check_cuda(kernels::launch_ll_combine_recv(pending_combine_, token_blocks(), stream),
               "launching the combine receive");
  }
  // The slot is free for the group's next step once this receive is queued: that step's
  // sending launch waits on the device for the credits this one gives. The step is over
  // before the host copy of the counts, which can still fail (and must not leave it pending).
  steps_.release(dispatch ? kLlDispatch : kLlCombine, pending_slot_);
  pending_ = EPC_PENDING_NONE;
  pending_slot_ = -1;
  const CountOutputs counts = pending_counts_;
  pending_counts_ = CountOutputs{};
  if (dispatch) {
    copy_counts_to_host(counts, pending_dispatch_.out_counts, group_.config().local_experts(group_.topology().nranks),
                        stream);
  }
}

EpcHandleInfo LlHandle::info() const {
  // EXPERT_PADDED: every [L, C, ...] output has C = capacity rows per zone; the token
  // layouts hold R * T rows (RANK_MAJOR as [R, T, ...]), which is their capacity.
  return handle_info(EPC_MODE_LOW_LATENCY, setup_, id_.number, num_tokens_, topk_, pending_,
                     static_cast<int64_t>(setup_.capacity));
}

}  // namespace epc
