// SPDX-License-Identifier: Apache-2.0
#include "core/ht/ht_handle.hpp"

#include <cstring>

#include "core/device_guard.hpp"
#include "core/error.hpp"
#include "core/gpu_check.hpp"
#include "core/routing_input.hpp"
#include "core/tensor_check.hpp"
#include "kernels/launch.hpp"

namespace epc {

namespace {

// Byte range of a tensor's data, for overlap checks.
bool overlaps(const EpcTensor* a, const EpcTensor* b) {
  const auto bytes = [](const EpcTensor* t) {
    size_t n = dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; ++i) n *= static_cast<size_t>(t->shape[i]);
    return n;
  };
  const auto* a0 = static_cast<const char*>(a->data);
  const auto* b0 = static_cast<const char*>(b->data);
  const size_t an = bytes(a), bn = bytes(b);
  return an > 0 && bn > 0 && a0 < b0 + bn && b0 < a0 + an;
}

}  // namespace

HtHandle::HtHandle(Group& group, HtSteps& steps, const EpcTensor* topk_idx, EpcHtSizing sizing, cudaStream_t stream)
    : group_(group), steps_(steps), sizing_(sizing), memory_(group.device()) {
  group_.check_healthy();
  const GroupConfig& c = group_.config();
  if (c.mode != EPC_MODE_HIGH_THROUGHPUT) {
    fail_argument(
        "the group is in low-latency mode; high-throughput handles need a group "
        "created with EPC_MODE_HIGH_THROUGHPUT");
  }
  topk_ = routing_topk(group_, topk_idx);
  const size_t R = static_cast<size_t>(group_.topology().nranks);
  const size_t T = c.max_tokens_per_rank;
  const size_t chunks = static_cast<size_t>(kernels::ht_chunks(static_cast<int>(T)));
  DeviceGuard guard(group_.device());
  const char* what = "cudaMalloc of the handle's layout";
  arrays_.topk_idx = memory_.allocate<int32_t>(T * topk_, "cudaMalloc of the handle's routing");
  arrays_.token_row = memory_.allocate<int32_t>(T * R, what);
  arrays_.chunk_start = memory_.allocate<int32_t>((chunks + 1) * R, what);
  arrays_.entry_counts = memory_.allocate<int32_t>(c.num_experts, what);
  arrays_.recv_count = memory_.allocate<int32_t>(R, what);
  arrays_.recv_base = memory_.allocate<int32_t>(R + 1, what);
  arrays_.source_tokens = memory_.allocate<int32_t>(R, what);
  arrays_.expert_counts = memory_.allocate<int32_t>(c.local_experts(static_cast<int>(R)), what);
  const size_t nodes = static_cast<size_t>(group_.topology().nodes());
  if (nodes > 1) {  // where dispatch forwarded each token, for combine to reduce there
    const size_t node_size = static_cast<size_t>(group_.topology().node_size);
    arrays_.forwarded_rows = memory_.allocate<int32_t>(nodes * T * node_size, what);
    arrays_.forwarded_topk = memory_.allocate<int32_t>(nodes * T * topk_, what);
  }
  // A layout that gives up (a timeout, or a group that a bad routing value has already
  // failed) writes none of the received counts, and a CAPACITY handle's dispatch or combine
  // queued behind it before the host saw the failure uses them as row offsets: start from
  // "nothing received" rather than from uninitialised memory.
  const char* zeroing = "zeroing the handle's layout";
  check_cuda(cudaMemsetAsync(arrays_.recv_count, 0, R * sizeof(int32_t), stream), zeroing);
  check_cuda(cudaMemsetAsync(arrays_.recv_base, 0, (R + 1) * sizeof(int32_t), stream), zeroing);
  check_cuda(cudaMemsetAsync(arrays_.source_tokens, 0, R * sizeof(int32_t), stream), zeroing);
  check_cuda(cudaMemsetAsync(arrays_.expert_counts, 0, c.local_experts(static_cast<int>(R)) * sizeof(int32_t), stream),
             zeroing);
  compute_layout(topk_idx, stream);
}

kernels::HtCommon HtHandle::common() const {
  const GroupConfig& c = group_.config();
  const int R = group_.topology().nranks;
  kernels::HtCommon k;
  std::memset(&k, 0, sizeof k);
  k.transport = group_.transport();
  k.geo.nranks = R;
  k.geo.rank = group_.rank();
  k.geo.local_experts = static_cast<int>(c.local_experts(R));
  k.geo.num_experts = static_cast<int>(c.num_experts);
  k.geo.max_tokens = static_cast<int>(c.max_tokens_per_rank);
  k.geo.hidden = static_cast<int>(c.hidden);
  k.geo.topk = topk_;
  k.geo.dispatch_slot = kernels::ht_dispatch_slot(c.hidden, c.dtype == EPC_DTYPE_FP8_E4M3 ? 1 : 2, c.max_topk);
  k.geo.combine_slot = kernels::ht_combine_slot(c.hidden, c.max_topk);
  k.geo.node_size = group_.topology().node_size;
  k.geo.num_nodes = group_.topology().nodes();
  k.geo.rail_slot = kernels::ht_rail_slot(k.geo.dispatch_slot, static_cast<uint32_t>(k.geo.node_size));
  k.handle = arrays_;
  k.state = steps_.state();
  k.error = group_.device_error();
  k.timeout_ns = group_.timeout_ns();
  k.num_tokens = num_tokens_;
  return k;
}

kernels::HtChannel HtHandle::channel(EpcRegionKind data, EpcRegionKind signal) const {
  kernels::HtChannel ch;
  ch.data_offset = group_.plan().region(data).offset;
  ch.flags_offset = group_.plan().region(signal).offset;
  ch.acks_offset = ch.flags_offset + ht_acks_offset(group_.config(), group_.topology().nranks);
  return ch;
}

void HtHandle::compute_layout(const EpcTensor* topk_idx, cudaStream_t stream) {
  const int tokens = copy_routing(group_, topk_idx, topk_, arrays_.topk_idx, stream);
  num_tokens_ = tokens;
  dispatched_ = false;
  kernels::HtLayoutParams p;
  std::memset(&p, 0, sizeof p);
  p.common = common();
  for (uint32_t s = 0; s < kHtLayoutSlots; ++s) p.slot_offset[s] = group_.plan().region(EPC_REGION_LAYOUT, s).offset;
  p.words_offset = ht_layout_words_offset(group_.topology().nranks);
  DeviceGuard guard(group_.device());
  check_cuda(kernels::launch_ht_layout(p, stream), "launching the high-throughput layout");
  const int64_t capacity = static_cast<int64_t>(group_.topology().nranks) * group_.config().max_tokens_per_rank;
  if (sizing_ == EPC_HT_SIZING_CAPACITY) {
    rows_ = capacity;
    return;
  }
  int32_t received = 0;
  check_cuda(cudaMemcpyAsync(&received, arrays_.recv_base + group_.topology().nranks, sizeof received,
                             cudaMemcpyDeviceToHost, stream),
             "reading the received row count");
  check_cuda(cudaStreamSynchronize(stream), "waiting for the high-throughput layout");
  group_.check_healthy();  // a peer that never sent its counts timed the layout out
  rows_ = received;
}

void HtHandle::update(const EpcTensor* topk_idx, cudaStream_t stream) {
  group_.check_healthy();
  if (sizing_ != EPC_HT_SIZING_CAPACITY) {
    fail_argument(
        "epc_handle_update: this high-throughput handle was created with "
        "EPC_HT_SIZING_EXACT, whose row count is fixed at creation; create a new "
        "handle for new routing, or use EPC_HT_SIZING_CAPACITY");
  }
  compute_layout(topk_idx, stream);
}

void HtHandle::dispatch(const EpcTensor* x, const EpcTensor* x_scales, const EpcTensor* topk_weights,
                        const EpcTensor* out_x, const EpcTensor* out_scales, const EpcTensor* out_topk_idx,
                        const EpcTensor* out_topk_weights, const EpcTensor* out_expert_counts,
                        const EpcTensor* out_num_recv, EpcFlags flags, cudaStream_t stream) {
  group_.check_healthy();
  if (flags != 0) fail_argument(format("epc_ht_dispatch: unknown flags 0x%x (none are defined; pass 0)", flags));
  const GroupConfig& c = group_.config();
  const int64_t B = num_tokens_, H = c.hidden, K = topk_, N = rows_;
  const int64_t L = c.local_experts(group_.topology().nranks);
  if (x == nullptr) fail_argument("tensor x is NULL");
  const bool fp8 = x->dtype == EPC_DTYPE_FP8_E4M3;
  if (fp8) {
    if (c.hidden % limits::kFp8BlockChannels != 0) {
      fail_argument(
          format("epc_ht_dispatch: fp8 x carries one scale per %d channels, but hidden "
                 "is %u (not a multiple of %d)",
                 limits::kFp8BlockChannels, c.hidden, limits::kFp8BlockChannels));
    }
    check_tensor(x, {"x", {EPC_DTYPE_FP8_E4M3}, {B, H}});
    check_tensor(x_scales, {"x_scales", {EPC_DTYPE_FP32}, {B, H / limits::kFp8BlockChannels}, 4});
    check_tensor(out_scales, {"out_scales", {EPC_DTYPE_FP32}, {N, H / limits::kFp8BlockChannels}, 4});
  } else {
    if (c.dtype == EPC_DTYPE_FP8_E4M3) {
      fail_argument(
          format("epc_ht_dispatch: the group was created with dtype EPC_DTYPE_FP8_E4M3, so "
                 "its buffers hold fp8 rows only, but x has dtype %s",
                 dtype_name(x->dtype)));
    }
    const EpcDtype token_dtype = c.dtype == EPC_DTYPE_FP16 ? EPC_DTYPE_FP16 : EPC_DTYPE_BF16;
    check_tensor(x, {"x", {token_dtype}, {B, H}});
    if (x_scales != nullptr || out_scales != nullptr) {
      fail_argument("epc_ht_dispatch: x_scales and out_scales must be NULL when x is not fp8");
    }
  }
  check_tensor(out_x, {"out_x", {x->dtype}, {N, H}});
  if ((topk_weights == nullptr) != (out_topk_weights == nullptr)) {
    fail_argument("epc_ht_dispatch: pass both topk_weights and out_topk_weights, or neither");
  }
  if (topk_weights != nullptr) {
    check_tensor(topk_weights, {"topk_weights", {EPC_DTYPE_FP32}, {B, K}, 4});
    check_tensor(out_topk_weights, {"out_topk_weights", {EPC_DTYPE_FP32}, {N, K}, 4});
  }
  if (out_topk_idx != nullptr) check_tensor(out_topk_idx, {"out_topk_idx", {EPC_DTYPE_INT32}, {N, K}, 4});
  if (out_expert_counts != nullptr) {
    check_tensor(out_expert_counts, {"out_expert_counts", {EPC_DTYPE_INT32}, {L}, 4});
  }
  if (out_num_recv != nullptr) check_tensor(out_num_recv, {"out_num_recv", {EPC_DTYPE_INT32}, {1}, 4});

  kernels::HtDispatchParams p;
  std::memset(&p, 0, sizeof p);
  p.common = common();
  p.channel = channel(EPC_REGION_DISPATCH_RECV, EPC_REGION_DISPATCH_SIGNAL);
  p.x = x->data;
  p.x_scales = fp8 ? static_cast<const float*>(x_scales->data) : nullptr;
  p.weights = topk_weights != nullptr ? static_cast<const float*>(topk_weights->data) : nullptr;
  p.out_x = out_x->data;
  p.out_scales = fp8 ? static_cast<float*>(out_scales->data) : nullptr;
  p.out_topk_idx = out_topk_idx != nullptr ? static_cast<int32_t*>(out_topk_idx->data) : nullptr;
  p.out_topk_weights = out_topk_weights != nullptr ? static_cast<float*>(out_topk_weights->data) : nullptr;
  p.out_expert_counts = out_expert_counts != nullptr ? static_cast<int32_t*>(out_expert_counts->data) : nullptr;
  p.out_num_recv = out_num_recv != nullptr ? static_cast<int32_t*>(out_num_recv->data) : nullptr;
  p.row_bytes = static_cast<int>(H * static_cast<int64_t>(dtype_size(x->dtype)));
  p.fp8 = fp8;
  p.common.send_warps = kernels::kHtDispatchSendWarps;
  if (group_.topology().nodes() > 1) {  // tokens cross between nodes once, then are forwarded
    p.common.forward_warps = kernels::kHtForwardWarps;
    p.rail_data_offset = group_.plan().region(EPC_REGION_RAIL_RECV).offset;
    p.rail_flags_offset = group_.plan().region(EPC_REGION_RAIL_SIGNAL).offset;
  }
  DeviceGuard guard(group_.device());
  check_cuda(kernels::launch_ht_dispatch(p, static_cast<int>(c.num_sms), stream),
             "launching the high-throughput dispatch");
  dispatched_ = true;
}

void HtHandle::combine(const EpcTensor* x, const EpcTensor* topk_weights, const EpcTensor* out,
                       const EpcTensor* out_topk_weights, EpcFlags flags, cudaStream_t stream) {
  group_.check_healthy();
  if ((flags & ~EPC_FLAG_BACKWARD_WEIGHTS) != 0) {
    fail_argument(format("epc_ht_combine: unknown flags 0x%x", flags & ~EPC_FLAG_BACKWARD_WEIGHTS));
  }
  const GroupConfig& c = group_.config();
  const int nodes = group_.topology().nodes();
  if (nodes > 1 && !dispatched_) {
    fail_argument(
        format("epc_ht_combine: this group spans %d nodes, and combine sums each token's "
               "rows inside a node where dispatch forwarded it; call epc_ht_dispatch on "
               "this handle (since its creation or last update) before epc_ht_combine",
               nodes));
  }
  const int64_t B = num_tokens_, H = c.hidden, K = topk_, N = rows_;
  check_tensor(x, {"x", {EPC_DTYPE_BF16}, {N, H}});
  check_tensor(out, {"out", {EPC_DTYPE_BF16}, {B, H}});
  if (overlaps(x, out)) fail_argument("epc_ht_combine: x and out overlap; combine cannot work in place");
  const bool backward = (flags & EPC_FLAG_BACKWARD_WEIGHTS) != 0;
  if (backward) {
    check_tensor(topk_weights, {"topk_weights", {EPC_DTYPE_FP32}, {N, K}, 4});
    check_tensor(out_topk_weights, {"out_topk_weights", {EPC_DTYPE_FP32}, {B, K}, 4});
  } else if (topk_weights != nullptr || out_topk_weights != nullptr) {
    fail_argument(
        "epc_ht_combine: topk_weights and out_topk_weights are carried only with "
        "EPC_FLAG_BACKWARD_WEIGHTS; pass NULL for both, or set the flag");
  }

  kernels::HtCombineParams p;
  std::memset(&p, 0, sizeof p);
  p.common = common();
  p.channel = channel(EPC_REGION_COMBINE_RECV, EPC_REGION_COMBINE_SIGNAL);
  p.x = static_cast<const uint16_t*>(x->data);
  p.weights = backward ? static_cast<const float*>(topk_weights->data) : nullptr;
  p.out = static_cast<uint16_t*>(out->data);
  p.out_weights = backward ? static_cast<float*>(out_topk_weights->data) : nullptr;
  p.common.send_warps = kernels::ht_combine_send_warps(group_.topology().node_size);
  if (nodes > 1) p.common.forward_warps = kernels::kHtCombineForwardWarps;  // reduce inside each node
  DeviceGuard guard(group_.device());
  check_cuda(kernels::launch_ht_combine(p, static_cast<int>(c.num_sms), stream),
             "launching the high-throughput combine");
}

}  // namespace epc
