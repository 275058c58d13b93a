// SPDX-License-Identifier: Apache-2.0
#include "core/ht/ht_handle.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/device_guard.hpp"
#include "core/error.hpp"
#include "core/gpu_check.hpp"
#include "core/handle_memory.hpp"
#include "core/ht/ht_parts.hpp"
#include "core/ht/ht_rings.hpp"
#include "core/passthrough.hpp"
#include "core/routing_input.hpp"
#include "core/tensor_check.hpp"
#include "kernels/launch.hpp"

namespace epc {

namespace {

// One token's bytes in a dispatch: its row (and out_x's columns), its scales.
struct PayloadBytes {
  int64_t row;
  int64_t scales;
  int64_t columns;
};

// EPC_QUANT_PASSTHROUGH: the inputs as both modes check them (core/passthrough.hpp), and
// out_scales of x_scales' dtype, [N, S].
PayloadBytes check_passthrough(const EpcDispatchArgs& a, int64_t B, int64_t N, int64_t H) {
  const PassthroughPayload p = check_passthrough_inputs(a, B, H);
  check_tensor(a.out_scales, {"EpcDispatchArgs.out_scales", {p.scale_dtype}, {N, p.scale_count}, p.scale_alignment});
  return PayloadBytes{p.row, p.scale_bytes, p.columns};
}

}  // namespace

HtHandle::HtHandle(Group& group, HtSteps& steps, const HandleSetup& setup, HandleName id, const EpcTensor* topk_idx,
                   cudaStream_t stream)
    : group_(group),
      steps_(steps),
      setup_(setup),
      id_(id),
      memory_(group.device()),
      part_config_(ht_part_config(group.config(), group.plan().ht_part_tokens)) {
  group_.check_healthy();
  const GroupConfig& c = group_.config();
  const int topk = topk_idx != nullptr ? routing_topk(group_, topk_idx) : 0;
  const uint32_t parts = ht_parts(c, part_config_.max_tokens_per_rank);
  if (parts > 1) check_parts_served(parts);
  DeviceGuard guard(group_.device());
  allocate_parts(stream);
  overflow_ = std::make_unique<HtOverflowReport>();
  if (setup_.sizing != EPC_SIZING_CAPACITY) {
    received_host_ = allocate_pinned<int32_t>(cudaHostAllocDefault, "cudaHostAlloc of the handle's received row count");
  }
  if (packed()) allocate_packed(stream);
  if (setup_.sizing == EPC_SIZING_CAPACITY) rows_ = static_cast<int64_t>(setup_.capacity);
  if (topk_idx != nullptr) compute_layout(topk_idx, topk, stream);
}

void HtHandle::check_parts_served(uint32_t parts) const {
  const char* why =
      "this group spans nodes, and its steps run in %u parts of %u tokens per rank (max_tokens_per_rank %u), "
      "whose rows %s; set EPCOMM_HT_PART_TOKENS=0 (whole steps, a window that grows with max_tokens_per_rank) "
      "or use %s";
  const uint32_t T = group_.config().max_tokens_per_rank, P = part_config_.max_tokens_per_rank;
  if (!packed() && setup_.sizing == EPC_SIZING_CAPACITY &&
      setup_.capacity < group_.config().recv_capacity_for(group_.topology().nranks)) {
    fail_unsupported(format(("EpcHandleConfig.capacity below recv_capacity: " + std::string(why)).c_str(), parts, P, T,
                            "would be dropped part by part rather than by (source rank, source token)", "capacity 0"));
  }
}

template <typename T>
void HtHandle::spread(size_t count, T* kernels::HtHandleArrays::* member, bool zeroed, cudaStream_t stream) {
  if (count == 0) return;
  const size_t parts = parts_.size();
  T* all = memory_.allocate<T>(count * parts, "cudaMalloc of the handle's layout");
  if (zeroed) check_cuda(cudaMemsetAsync(all, 0, count * parts * sizeof(T), stream), "zeroing the handle's layout");
  for (size_t k = 0; k < parts; ++k) parts_[k].arrays.*member = all + k * count;
}

void HtHandle::allocate_parts(cudaStream_t stream) {
  const GroupConfig& c = group_.config();
  const Topology& topo = group_.topology();
  const bool rings = group_.plan().ht_dispatch_rings.capacity > 0;
  const HtHandleSizes n = ht_handle_sizes(part_config_, topo, rings);
  const size_t parts = ht_parts(c, part_config_.max_tokens_per_rank);
  parts_.assign(parts, Part{});
  // The routing once, every part reading its tokens' rows of it (compute_layout).
  int32_t* topk = memory_.allocate<int32_t>(static_cast<size_t>(c.max_tokens_per_rank) * c.max_topk,
                                            "cudaMalloc of the handle's routing");
  for (Part& part : parts_) part.arrays.topk_idx = topk;
  // The counts zeroed: a layout that gives up (a timeout, or a group that a bad routing value
  // has already failed) writes none of them, and a CAPACITY handle's dispatch or combine
  // queued behind it before the host saw the failure uses them as row offsets.
  using A = kernels::HtHandleArrays;
  spread(n.token_row, &A::token_row, false, stream);
  spread(n.chunk_start, &A::chunk_start, false, stream);
  spread(n.entry_counts, &A::entry_counts, false, stream);
  spread(n.recv_count, &A::recv_count, true, stream);
  spread(n.recv_base, &A::recv_base, true, stream);
  spread(n.source_tokens, &A::source_tokens, true, stream);
  spread(n.expert_counts, &A::expert_counts, true, stream);
  spread(n.send_slot, &A::send_slot, true, stream);
  spread(n.recv_slot, &A::recv_slot, true, stream);
  spread(1, &A::overflow, true, stream);
  spread(n.ring_tokens, &A::ring_tokens, false, stream);
  // Across nodes: where dispatch forwarded each token, for combine to reduce there.
  spread(n.forwarded_rows, &A::forwarded_rows, false, stream);
  spread(n.forwarded_topk, &A::forwarded_topk, false, stream);
  spread(n.forward_slot, &A::forward_slot, true, stream);
}

HtHandle::~HtHandle() {
  if (pending_ == EPC_PENDING_NONE) return;
  const bool dispatch = pending_ == EPC_PENDING_DISPATCH;
  if (steps_.pending_owner(dispatch) == id_) steps_.set_pending_owner(dispatch, HandleName{});
  abandon_pending();
}

void HtHandle::abandon_pending() noexcept {
  try {
    group_.check_async_error();  // a failed group runs nothing more
    DeviceGuard guard(group_.device());
    // The sending launch went to a stream this call does not know: once the device has
    // finished it, any stream is ordered after it.
    check_cuda(cudaDeviceSynchronize(), "waiting for the pending send-only step");
    const cudaError_t launched = pending_ == EPC_PENDING_DISPATCH
                                     ? kernels::launch_ht_dispatch_abandon(pending_dispatch_, nullptr)
                                     : kernels::launch_ht_combine_abandon(pending_combine_, nullptr);
    check_cuda(launched, "ending the pending send-only step");
    check_cuda(cudaDeviceSynchronize(), "ending the pending send-only step");
  } catch (...) {
    // Destroy reports nothing for it: the group keeps any failure the device recorded.
  }
}

void HtHandle::allocate_packed(cudaStream_t stream) {
  const GroupConfig& c = group_.config();
  const Topology& topo = group_.topology();
  // The entries' places once, as the routing (compute_layout gives each part its tokens');
  // every other array per part, of a part's tokens.
  const size_t R = static_cast<size_t>(topo.nranks), T = c.max_tokens_per_rank, K = c.max_topk;
  const size_t P = part_config_.max_tokens_per_rank;
  const size_t L = c.local_experts(topo.nranks);
  const char* what = "cudaMalloc of the handle's expert-packed layout";
  int32_t* positions = memory_.allocate<int32_t>(T * K, what);
  for (Part& part : parts_) part.arrays.entry_position = positions;
  using A = kernels::HtHandleArrays;
  spread(R * (L + 1), &A::source_starts, true, stream);
  spread(R * L, &A::expert_base, true, stream);
  spread(L + 1, &A::expert_offsets, true, stream);
  spread(R * P * K, &A::entry_rows, false, stream);
  spread(R * P * K, &A::entry_weights, false, stream);
  // The sort's scratch, used by one part after the other.
  order_.keys_in = memory_.allocate<uint32_t>(P * K, what);
  order_.keys_out = memory_.allocate<uint32_t>(P * K, what);
  order_.values_in = memory_.allocate<int32_t>(P * K, what);
  order_.values_out = memory_.allocate<int32_t>(P * K, what);
  order_.temp_bytes = kernels::ht_entry_order_temp_bytes(static_cast<int>(P * K), static_cast<int>(c.num_experts));
  order_.temp = memory_.allocate<uint8_t>(order_.temp_bytes, what);
  order_.num_experts = static_cast<int>(c.num_experts);
  order_.local_experts = static_cast<int>(L);
}

int64_t HtHandle::row_limit() const {
  const uint64_t window = group_.config().recv_capacity_for(group_.topology().nranks);
  const bool own_capacity = !packed() && setup_.sizing == EPC_SIZING_CAPACITY && setup_.capacity < window;
  return static_cast<int64_t>(own_capacity ? setup_.capacity : window);
}

kernels::HtCommon HtHandle::common(const Part& part) const {
  const GroupConfig& c = group_.config();
  const int R = group_.topology().nranks;
  kernels::HtCommon k;
  std::memset(&k, 0, sizeof k);
  k.transport = group_.transport();
  k.geo.nranks = R;
  k.geo.rank = group_.rank();
  k.geo.local_experts = static_cast<int>(c.local_experts(R));
  k.geo.num_experts = static_cast<int>(c.num_experts);
  k.geo.max_tokens = static_cast<int>(part_config_.max_tokens_per_rank);  // what the window holds
  k.geo.hidden = static_cast<int>(c.hidden);
  k.geo.topk = topk_;
  k.geo.dispatch_slot =
      kernels::ht_dispatch_slot(c.hidden, c.dtype == EPC_DTYPE_FP8_E4M3 ? 1 : 2, c.max_topk, c.token_bytes);
  k.geo.combine_slot = kernels::ht_combine_slot(c.hidden, c.max_topk);
  k.geo.node_size = group_.topology().node_size;
  k.geo.num_nodes = group_.topology().nodes();
  k.geo.rail_slot = kernels::ht_rail_slot(k.geo.dispatch_slot, static_cast<uint32_t>(k.geo.node_size), c.max_topk);
  k.handle = part.arrays;
  k.state = steps_.state();
  k.error = group_.device_error();
  k.timeout_ns = group_.timeout_ns();
  k.num_tokens = part.num_tokens;
  return k;
}

kernels::HtChannel HtHandle::channel(EpcRegionKind data, EpcRegionKind signal) const {
  kernels::HtChannel ch;
  ch.data_offset = group_.plan().region(data).offset;
  ch.flags_offset = group_.plan().region(signal).offset;
  ch.acks_offset = ch.flags_offset + ht_acks_offset(part_config_, group_.topology().nranks);
  return ch;
}

void HtHandle::compute_layout(const EpcTensor* topk_idx, int topk, cudaStream_t stream) {
  const int previous_topk = topk_;
  topk_ = topk;
  int tokens = 0;
  try {
    tokens = copy_routing(group_, topk_idx, topk_, parts_.front().arrays.topk_idx, stream);
  } catch (...) {
    topk_ = previous_topk;  // a failing call changes nothing
    throw;
  }
  try {
    lay_out(tokens, stream);
  } catch (...) {
    // The new routing's copy is queued and its layout is not: until an update succeeds the
    // handle has no routing, rather than steps over the layout of another one.
    topk_ = 0;
    num_tokens_ = 0;
    dispatched_ = false;
    if (setup_.sizing == EPC_SIZING_EXACT) rows_ = 0;
    throw;
  }
}

void HtHandle::lay_out(int tokens, cudaStream_t stream) {
  int32_t* routing = parts_.front().arrays.topk_idx;
  num_tokens_ = tokens;
  dispatched_ = false;
  const int part_tokens = static_cast<int>(part_config_.max_tokens_per_rank);
  for (size_t k = 0; k < parts_.size(); ++k) {
    Part& part = parts_[k];
    part.token_begin = static_cast<int>(k) * part_tokens;
    part.num_tokens = std::clamp(tokens - part.token_begin, 0, part_tokens);
    part.arrays.topk_idx = routing + static_cast<size_t>(part.token_begin) * topk_;
  }
  kernels::HtLayoutParams p;
  std::memset(&p, 0, sizeof p);
  for (uint32_t s = 0; s < kHtLayoutSlots; ++s) p.slot_offset[s] = group_.plan().region(EPC_REGION_LAYOUT, s).offset;
  const GroupConfig& c = group_.config();
  const int R = group_.topology().nranks;
  const int L = static_cast<int>(c.local_experts(R));
  p.words_offset = ht_layout_words_offset(R);
  p.round2_signals = ht_layout_round2_signals(R);
  p.round2_words_offset = ht_layout_round2_words_offset(R, L);
  p.expert_alignment = packed() ? static_cast<int>(setup_.expert_alignment) : 0;
  // A part's rows always fit its window (check_parts_served: nothing is dropped).
  p.row_limit = static_cast<int>(parts_.size() > 1 ? part_config_.worst_case_recv(R) : row_limit());
  p.compact_window = part_config_.recv_capacity_for(R) < part_config_.worst_case_recv(R);
  p.fail_on_overflow = c.overflow == EPC_OVERFLOW_FAIL;
  p.host_record = overflow_->device_record();
  p.sequence = overflow_->next_routing();
  DeviceGuard guard(group_.device());
  for (Part& part : parts_) {
    if (packed()) {  // the part's entries numbered per expert, before its layout
      part.arrays.entry_position = parts_.front().arrays.entry_position + static_cast<size_t>(part.token_begin) * topk_;
      kernels::HtEntryOrder order = order_;
      order.topk_idx = part.arrays.topk_idx;
      order.positions = part.arrays.entry_position;
      order.entries = part.num_tokens * topk_;
      check_cuda(kernels::launch_ht_entry_order(order, stream), "numbering the entries per expert");
    }
    p.common = common(part);
    check_cuda(kernels::launch_ht_layout(p, stream), "launching the high-throughput layout");
  }
  const kernels::HtHandleArrays& last = parts_.back().arrays;
  if (parts_.size() > 1) {
    const kernels::HtHandleArrays& first = parts_.front().arrays;
    const kernels::HtHandleArrays& second = parts_[1].arrays;
    kernels::HtPartsLayout whole{};
    whole.recv_count = first.recv_count;
    whole.recv_base = first.recv_base;
    whole.expert_counts = first.expert_counts;
    whole.expert_base = first.expert_base;
    whole.expert_offsets = first.expert_offsets;
    whole.alignment = packed() ? static_cast<int>(setup_.expert_alignment) : 0;
    whole.parts = static_cast<int>(parts_.size());
    whole.nranks = R;
    whole.local_experts = L;
    whole.recv_count_stride = static_cast<int>(second.recv_count - first.recv_count);
    whole.recv_base_stride = static_cast<int>(second.recv_base - first.recv_base);
    whole.expert_counts_stride = static_cast<int>(second.expert_counts - first.expert_counts);
    whole.expert_base_stride = packed() ? static_cast<int>(second.expert_base - first.expert_base) : 0;
    whole.expert_offsets_stride = packed() ? static_cast<int>(second.expert_offsets - first.expert_offsets) : 0;
    check_cuda(kernels::launch_ht_parts_layout(whole, stream), "placing the parts' rows of the layout");
  }
  if (setup_.sizing == EPC_SIZING_CAPACITY) return;
  const int32_t* rows = packed() ? last.expert_offsets + L : last.recv_base + R;
  check_cuda(cudaMemcpyAsync(received_host_.get(), rows, sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
             "reading the received row count");
  check_cuda(cudaStreamSynchronize(stream), "waiting for the high-throughput layout");
  const int32_t received = *received_host_;
  group_.check_healthy();  // a peer that never sent its counts timed the layout out
  rows_ = packed() ? received : std::min<int64_t>(received, row_limit());  // rows past the limit are dropped
}

void HtHandle::update(const EpcTensor* topk_idx, cudaStream_t stream) {
  group_.check_healthy();
  require_ready("epc_handle_update", /*starts_step=*/false, /*dispatch=*/false, /*send_only=*/false);
  const int topk = routing_topk(group_, topk_idx, topk_);
  compute_layout(topk_idx, topk, stream);
}

void HtHandle::require_routed(const char* call) const {
  if (topk_ == 0) {
    fail_usage(
        format("%s: %s has no routing (none was given, or the last epc_handle_update failed); call "
               "epc_handle_update first",
               call, id_.text().c_str()));
  }
}

void HtHandle::require_ready(const char* call, bool starts_step, bool dispatch, bool send_only) const {
  if (pending_ != EPC_PENDING_NONE) {
    fail_usage(format("%s: %s has a send-only %s pending; call epc_complete on it first", call, id_.text().c_str(),
                      pending_ == EPC_PENDING_DISPATCH ? "dispatch" : "combine"));
  }
  if (!starts_step) return;
  const char* operation = dispatch ? "dispatch" : "combine";
  const HandleName owner = steps_.pending_owner(dispatch);
  if (owner) {
    fail_usage(
        format("%s on %s: %s of this high-throughput group has a send-only %s pending, whose "
               "slots and step a second %s would reuse; call epc_complete on it first",
               call, id_.text().c_str(), owner.text().c_str(), operation, operation));
  }
  // The other operation's pending step, if any, counts against max_pending_steps.
  const HandleName other = steps_.pending_owner(!dispatch);
  const uint32_t limit = group_.config().max_pending_steps;
  if (send_only && other && limit < 2) {
    fail_usage(
        format("%s with EPC_STEP_SEND_ONLY on %s: %s of this group has a send-only %s pending, and "
               "the group allows max_pending_steps = %u; call epc_complete on it first, or queue this "
               "%s without EPC_STEP_SEND_ONLY",
               call, id_.text().c_str(), other.text().c_str(), dispatch ? "combine" : "dispatch", limit, operation));
  }
  require_routed(call);
}

void HtHandle::dispatch(const EpcDispatchArgs& a, cudaStream_t stream) {
  group_.check_healthy();
  const bool send_only = (a.flags & EPC_STEP_SEND_ONLY) != 0;
  require_ready("epc_dispatch", /*starts_step=*/true, /*dispatch=*/true, send_only);
  overflow_->check("epc_dispatch", group_.config().overflow == EPC_OVERFLOW_FAIL, id_);
  if (send_only) require_ht_split_served(group_.topology().nodes(), "EpcDispatchArgs.flags");
  const int blocks =
      resolve_send_sms(a.send_sms, group_.config().num_sms, group_.device_sms(), "EpcDispatchArgs.send_sms");
  resolve_max_step_tokens(a.max_step_tokens, num_tokens_, group_.config().max_tokens_per_rank);
  const kernels::HtRingArea& rings = group_.plan().ht_dispatch_rings;
  if (rings.capacity > 0) {
    const int64_t G = rings.channels, S = rings.node_size;
    check_ht_rings_served(
        rings, packed(), send_only,
        {"epc_dispatch", blocks, kernels::ht_dispatch_rings_fused_blocks(), kernels::kHtDispatchSendWarps,
         kernels::kHtBlockWarps - kernels::kHtDispatchSendWarps, G, S * G});
  }
  if (a.quant == EPC_QUANT_FP8) {
    fail_unsupported(
        format("EpcDispatchArgs.quant EPC_QUANT_FP8 (a cast in the send kernel) is not served on "
               "high-throughput groups in ABI %d.%d; quantize and pass EPC_QUANT_PASSTHROUGH",
               EPC_ABI_MAJOR, EPC_ABI_MINOR));
  }
  const GroupConfig& c = group_.config();
  const int64_t B = num_tokens_, H = c.hidden, K = topk_, N = rows_;
  const int64_t L = c.local_experts(group_.topology().nranks);
  const bool passthrough = a.quant == EPC_QUANT_PASSTHROUGH;
  const PayloadBytes bytes = passthrough ? check_passthrough(a, B, N, H) : PayloadBytes{2 * H, 0, H};
  if (!passthrough) check_tensor(a.x, {"EpcDispatchArgs.x", {EPC_DTYPE_BF16, EPC_DTYPE_FP16}, {B, H}});
  if (bytes.row + bytes.scales > static_cast<int64_t>(c.max_token_bytes())) {
    fail_argument(
        format("EpcDispatchArgs.x_scales: a row of x (%lld bytes) and its scales (%lld bytes) exceed the group's "
               "EpcGroupConfig.max_token_bytes (%u), the bytes per token its window holds",
               static_cast<long long>(bytes.row), static_cast<long long>(bytes.scales), c.max_token_bytes()));
  }
  check_tensor(a.out_x, {"EpcDispatchArgs.out_x", {a.x->dtype}, {N, bytes.columns}});
  if (a.topk_weights != nullptr)
    check_tensor(a.topk_weights, {"EpcDispatchArgs.topk_weights", {EPC_DTYPE_FP32}, {B, K}, 4});
  if (a.out_topk_weights != nullptr && packed()) {
    check_tensor(a.out_topk_weights, {"EpcDispatchArgs.out_topk_weights", {EPC_DTYPE_FP32}, {N}, 4});
  } else if (a.out_topk_weights != nullptr) {
    check_tensor(a.out_topk_weights, {"EpcDispatchArgs.out_topk_weights", {EPC_DTYPE_FP32}, {N, K}, 4});
  }
  const char* no_column =
      packed() ? "EPC_LAYOUT_EXPERT_PACKED has no such output" : "EPC_LAYOUT_FLAT has no such output";
  if (packed()) require_absent(a.out_topk_idx, "EpcDispatchArgs.out_topk_idx", no_column);
  if (a.out_topk_idx != nullptr)
    check_tensor(a.out_topk_idx, {"EpcDispatchArgs.out_topk_idx", {EPC_DTYPE_INT32}, {N, K}, 4});
  if (a.out_expert_counts != nullptr) {
    check_tensor(a.out_expert_counts, {"EpcDispatchArgs.out_expert_counts", {EPC_DTYPE_INT32}, {L}, 4});
  }
  if (a.out_num_recv != nullptr)
    check_tensor(a.out_num_recv, {"EpcDispatchArgs.out_num_recv", {EPC_DTYPE_INT32}, {1}, 4});
  if (packed() && a.out_expert_offsets != nullptr) {
    check_tensor(a.out_expert_offsets,
                 {"EpcDispatchArgs.out_expert_offsets", {EPC_DTYPE_INT32, EPC_DTYPE_INT64}, {L + 1}, 4});
  }
  if (!packed()) require_absent(a.out_expert_offsets, "EpcDispatchArgs.out_expert_offsets", no_column);
  require_absent(a.out_rank_counts, "EpcDispatchArgs.out_rank_counts", no_column);
  const CountOutputs counts = check_count_outputs(a, L);

  kernels::HtDispatchParams p;
  std::memset(&p, 0, sizeof p);
  p.common = common(parts_.front());
  p.channel = channel(EPC_REGION_DISPATCH_RECV, EPC_REGION_DISPATCH_SIGNAL);
  p.x = a.x->data;
  p.x_scales = passthrough ? a.x_scales->data : nullptr;
  // Weights travel only where they are received (EXPERT_PACKED: by combine's weighting too).
  const bool weights_travel = a.out_topk_weights != nullptr || (packed() && a.topk_weights != nullptr);
  p.weights = weights_travel ? static_cast<const float*>(a.topk_weights->data) : nullptr;
  p.packed = packed();
  p.zero_padding = packed() && (setup_.flags & EPC_HANDLE_ZERO_PADDING) != 0;
  if (packed() && a.out_expert_offsets != nullptr) {
    if (a.out_expert_offsets->dtype == EPC_DTYPE_INT64) {
      p.out_expert_offsets64 = static_cast<int64_t*>(a.out_expert_offsets->data);
    } else {
      p.out_expert_offsets = static_cast<int32_t*>(a.out_expert_offsets->data);
    }
  }
  p.out_x = a.out_x->data;
  p.out_scales = passthrough ? a.out_scales->data : nullptr;
  p.out_topk_idx = a.out_topk_idx != nullptr ? static_cast<int32_t*>(a.out_topk_idx->data) : nullptr;
  p.out_topk_weights = a.out_topk_weights != nullptr ? static_cast<float*>(a.out_topk_weights->data) : nullptr;
  p.out_expert_counts = a.out_expert_counts != nullptr ? static_cast<int32_t*>(a.out_expert_counts->data) : nullptr;
  p.acc_expert_counts = counts.accumulated;
  p.out_num_recv = a.out_num_recv != nullptr ? static_cast<int32_t*>(a.out_num_recv->data) : nullptr;
  p.expert_id_base = (setup_.flags & EPC_HANDLE_GLOBAL_EXPERT_IDS) != 0 ? group_.rank() * static_cast<int32_t>(L) : 0;
  p.row_bytes = static_cast<int>(bytes.row);
  p.scale_bytes = static_cast<int>(bytes.scales);
  p.scales_offset = kernels::ht_scales_offset(static_cast<uint32_t>(bytes.row));
  p.common.send_warps = kernels::kHtDispatchSendWarps;
  p.rings = rings;
  if (group_.topology().nodes() > 1) {  // tokens cross between nodes once, then are forwarded
    p.common.forward_warps = kernels::kHtForwardWarps;
    p.rail_data_offset = group_.plan().region(EPC_REGION_RAIL_RECV).offset;
    p.rail_flags_offset = group_.plan().region(EPC_REGION_RAIL_SIGNAL).offset;
  }
  DeviceGuard guard(group_.device());
  if (send_only) {
    check_cuda(kernels::launch_ht_dispatch(p, blocks, stream, kernels::HtHalves::kSend),
               "launching the high-throughput dispatch send");
    pending_ = EPC_PENDING_DISPATCH;
    pending_dispatch_ = p;
    pending_counts_ = counts;
    pending_weights_ = a.topk_weights != nullptr;
    steps_.set_pending_owner(/*dispatch=*/true, id_);
    // The send half runs the layout, which writes the overflow report: later calls and
    // epc_handle_query read it as after a fused dispatch.
    overflow_->dispatched();
    return;
  }
  // Part by part (one where steps run whole): its tokens, its layout; the counts are the
  // whole step's, which the last part's layout holds (kernels::launch_ht_parts_layout).
  for (const Part& part : parts_) {
    kernels::HtDispatchParams q = p;
    q.common = common(part);
    q.common.send_warps = p.common.send_warps;
    q.common.forward_warps = p.common.forward_warps;
    q.x = static_cast<const char*>(p.x) + part.token_begin * bytes.row;
    if (p.x_scales != nullptr) q.x_scales = static_cast<const char*>(p.x_scales) + part.token_begin * bytes.scales;
    if (p.weights != nullptr) q.weights = p.weights + static_cast<int64_t>(part.token_begin) * K;
    if (&part != &parts_.back()) {  // the last part writes what concerns the whole step
      q.out_expert_counts = nullptr;
      q.acc_expert_counts = nullptr;
      q.out_num_recv = nullptr;
      q.out_expert_offsets = nullptr;
      q.out_expert_offsets64 = nullptr;
      q.zero_padding = false;
    }
    check_cuda(kernels::launch_ht_dispatch(q, blocks, stream), "launching the high-throughput dispatch");
  }
  // The step is queued on every rank that got here: the handle's state says so before the
  // host copy of the counts, which can still fail.
  dispatched_ = true;
  dispatched_weights_ = a.topk_weights != nullptr;
  overflow_->dispatched();
  copy_counts_to_host(counts, parts_.back().arrays.expert_counts, L, stream);
}

void HtHandle::combine(const EpcCombineArgs& a, cudaStream_t stream) {
  group_.check_healthy();
  const bool send_only = (a.flags & EPC_STEP_SEND_ONLY) != 0;
  require_ready("epc_combine", /*starts_step=*/true, /*dispatch=*/false, send_only);
  overflow_->check("epc_combine", group_.config().overflow == EPC_OVERFLOW_FAIL, id_);
  if (send_only) require_ht_split_served(group_.topology().nodes(), "EpcCombineArgs.flags");
  const int blocks =
      resolve_send_sms(a.send_sms, group_.config().num_sms, group_.device_sms(), "EpcCombineArgs.send_sms");
  const EpcWeighting weighting = resolve_ht_weighting(a.weighting, setup_.layout, group_.config().flags);
  const bool weighted = weighting == EPC_WEIGHTING_SENDER;
  const bool home = weighting == EPC_WEIGHTING_HOME;
  if (packed() && !dispatched_) {
    fail_usage(
        format("epc_combine: EXPERT_PACKED combine sums the rows dispatch gave each entry; call epc_dispatch "
               "on %s (since its last routing) first",
               id_.text().c_str()));
  }
  if (weighted && !dispatched_weights_) {
    fail_argument(
        "EpcCombineArgs.weighting is EPC_WEIGHTING_SENDER (the default for EPC_LAYOUT_EXPERT_PACKED), but the "
        "handle's last dispatch had no topk_weights; pass them to epc_dispatch, or combine with "
        "EPC_WEIGHTING_NONE");
  }
  const GroupConfig& c = group_.config();
  const int nodes = group_.topology().nodes();
  if (nodes > 1 && !dispatched_) {
    fail_usage(
        format("epc_combine: this group spans %d nodes, and combine sums each token's rows inside a node "
               "where dispatch forwarded it; call epc_dispatch on %s (since its last routing) first",
               nodes, id_.text().c_str()));
  }
  const int64_t B = num_tokens_, H = c.hidden, K = topk_, N = rows_;
  if (a.x->dtype == EPC_DTYPE_FP16) {
    fail_unsupported(format("EpcCombineArgs.x of dtype fp16 is not served in ABI %d.%d; bf16 travels", EPC_ABI_MAJOR,
                            EPC_ABI_MINOR));
  }
  check_tensor(a.x, {"EpcCombineArgs.x", {EPC_DTYPE_BF16}, {N, H}});
  check_tensor(a.out, {"EpcCombineArgs.out", {EPC_DTYPE_BF16, EPC_DTYPE_FP16, EPC_DTYPE_FP32}, {B, H}});
  if (tensors_overlap(a.x, a.out)) fail_argument("EpcCombineArgs.x and out overlap; combine cannot work in place");
  const bool backward = a.topk_weights != nullptr;
  if (backward) {
    if (packed()) {
      check_tensor(a.topk_weights, {"EpcCombineArgs.topk_weights", {EPC_DTYPE_FP32}, {N}, 4});
    } else {
      check_tensor(a.topk_weights, {"EpcCombineArgs.topk_weights", {EPC_DTYPE_FP32}, {N, K}, 4});
    }
    check_tensor(a.out_topk_weights, {"EpcCombineArgs.out_topk_weights", {EPC_DTYPE_FP32}, {B, K}, 4});
  }
  if (home) check_tensor(a.home_topk_weights, {"EpcCombineArgs.home_topk_weights", {EPC_DTYPE_FP32}, {B, K}, 4});
  const kernels::HtRingArea& rings = group_.plan().ht_combine_rings;
  if (rings.capacity > 0) {
    const int64_t G = rings.channels, S = rings.node_size;
    check_ht_rings_served(
        rings, packed(), send_only,
        {"epc_combine", blocks, kernels::ht_combine_rings_fused_blocks(), kernels::kHtRingCombineSendWarps,
         kernels::kHtBlockWarps - kernels::kHtRingCombineSendWarps, S * G, G});
    if (!dispatched_) {
      fail_usage(
          format("epc_combine: EPCOMM_HT_RING_SLOTS is set, and combine returns rows through the rings in the "
                 "order of the tokens a dispatch over them recorded; call epc_dispatch on %s (since its last "
                 "routing) first",
                 id_.text().c_str()));
    }
  }

  kernels::HtCombineParams p;
  std::memset(&p, 0, sizeof p);
  p.common = common(parts_.front());
  p.channel = channel(EPC_REGION_COMBINE_RECV, EPC_REGION_COMBINE_SIGNAL);
  p.x = static_cast<const uint16_t*>(a.x->data);
  p.weights = backward ? static_cast<const float*>(a.topk_weights->data) : nullptr;
  p.out = a.out->data;
  p.out_type = sum_output_of(a.out->dtype);
  p.out_weights = backward ? static_cast<float*>(a.out_topk_weights->data) : nullptr;
  p.packed = packed();
  p.weighted = weighted;
  // A token has about K / R entries per rank it goes to: with K <= R most are one row there,
  // which the lone-row kernels send and sum without the partial's loop (kernels/wire/
  // ht_params.hpp says when that is exact); with more the plain kernels are faster. Weighted,
  // the lone-row kernels lose more on a token with several rows than they gain on one with
  // one (top-2 on two ranks measured slower): only top-1, where every token has one.
  p.lone_rows = p.packed && !home && p.out_type != kernels::SumOutput::kFp32 &&
                topk_ <= static_cast<int>(group_.topology().nranks) && (!weighted || topk_ == 1);
  if (home) {  // one row per (token, entry) returns (kernels/wire/ht_params.hpp)
    p.home_weights = static_cast<const float*>(a.home_topk_weights->data);
    p.entry_slots = static_cast<int>(c.combine_slots_per_token());
  }
  p.common.send_warps = kernels::ht_combine_send_warps(group_.topology().node_size);
  if (rings.capacity > 0) {  // every ring has a writer warp, this rank's own included
    p.rings = rings;
    p.common.send_warps = kernels::kHtRingCombineSendWarps;
  }
  if (nodes > 1) p.common.forward_warps = kernels::kHtCombineForwardWarps;  // reduce inside each node
  DeviceGuard guard(group_.device());
  if (send_only) {
    check_cuda(kernels::launch_ht_combine(p, blocks, stream, kernels::HtHalves::kSend),
               "launching the high-throughput combine send");
    pending_ = EPC_PENDING_COMBINE;
    pending_combine_ = p;
    steps_.set_pending_owner(/*dispatch=*/false, id_);
    return;
  }
  // Part by part (one where steps run whole), each summing its tokens' rows into its rows of out.
  const int64_t out_row_bytes = H * static_cast<int64_t>(dtype_size(a.out->dtype));
  for (const Part& part : parts_) {
    kernels::HtCombineParams q = p;
    q.common = common(part);
    q.common.send_warps = p.common.send_warps;
    q.common.forward_warps = p.common.forward_warps;
    q.out = static_cast<char*>(p.out) + part.token_begin * out_row_bytes;
    if (p.out_weights != nullptr) q.out_weights = p.out_weights + static_cast<int64_t>(part.token_begin) * K;
    if (p.home_weights != nullptr) q.home_weights = p.home_weights + static_cast<int64_t>(part.token_begin) * K;
    check_cuda(kernels::launch_ht_combine(q, blocks, stream), "launching the high-throughput combine");
  }
}

void HtHandle::complete(cudaStream_t stream) {
  group_.check_healthy();
  if (pending_ == EPC_PENDING_NONE) {
    fail_usage(
        format("epc_complete: %s has nothing pending (no dispatch or combine was queued with "
               "EPC_STEP_SEND_ONLY)",
               id_.text().c_str()));
  }
  const int blocks = static_cast<int>(group_.config().num_sms);
  const bool dispatch = pending_ == EPC_PENDING_DISPATCH;
  DeviceGuard guard(group_.device());
  if (dispatch) {
    check_cuda(kernels::launch_ht_dispatch(pending_dispatch_, blocks, stream, kernels::HtHalves::kReceive),
               "launching the high-throughput dispatch receive");
    dispatched_ = true;
    dispatched_weights_ = pending_weights_;
  } else {
    check_cuda(kernels::launch_ht_combine(pending_combine_, blocks, stream, kernels::HtHalves::kReceive),
               "launching the high-throughput combine receive");
  }
  // The step is over before the host copy of the counts, which can still fail (and must not
  // leave it pending).
  pending_ = EPC_PENDING_NONE;
  const CountOutputs counts = pending_counts_;
  pending_counts_ = CountOutputs{};
  steps_.set_pending_owner(dispatch, HandleName{});
  if (dispatch) {
    copy_counts_to_host(counts, parts_.back().arrays.expert_counts,
                        group_.config().local_experts(group_.topology().nranks), stream);
  }
}

EpcHandleInfo HtHandle::info() const {
  EpcHandleInfo info = handle_info(EPC_MODE_HIGH_THROUGHPUT, setup_, id_.number, num_tokens_, topk_, pending_, rows_);
  overflow_->fill(info);
  return info;
}

}  // namespace epc
