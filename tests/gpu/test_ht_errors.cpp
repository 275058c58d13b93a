// SPDX-License-Identifier: Apache-2.0
// Bad arguments to the high-throughput calls: EPC_ERR_INVALID_ARGUMENT (or EPC_ERR_UNSUPPORTED
// for what the ABI defines and 2.0 does not serve) with a message naming the struct and field,
// nothing written to out-parameters, nothing queued (every rank makes the same bad calls, and
// the handles still give exact results afterwards).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest::ht {
namespace {

// `status` must be `want` and the message must contain `part`. Call it directly on the
// epc_* call's result (the message is read at once).
void expect_status(EpcStatus status, EpcStatus want, const std::string& part, const std::string& what) {
  const std::string message = last_error();
  EXPECT_EQ(status, want) << what << ": got " << epc_status_string(status) << ": " << message;
  EXPECT_NE(message.find(part), std::string::npos)
      << what << ": the message should mention \"" << part << "\": " << message;
}
void expect_invalid(EpcStatus status, const std::string& part, const std::string& what) {
  expect_status(status, EPC_ERR_INVALID_ARGUMENT, part, what);
}

// One epc_dispatch call's tensors and arguments; has_* false passes NULL.
struct DispatchCall {
  EpcTensor x, x_scales, weights, out_x, out_scales, out_idx, out_weights, counts, num_recv;
  bool has_x_scales = false, has_weights = true, has_out_scales = false, has_out_idx = true, has_out_weights = true,
       has_counts = true, has_num_recv = true;
  EpcQuant quant = EPC_QUANT_NONE;
  uint32_t flags = 0;
  uint32_t send_sms = 0, reserved0 = 0;
  // Applied to the argument struct last, for fields without a tensor of their own above.
  void (*extra)(EpcDispatchArgs&, const EpcTensor& spare) = nullptr;

  EpcStatus run(EpcHandle* handle, cudaStream_t stream) const {
    EpcDispatchArgs a = EPC_DISPATCH_ARGS_INIT;
    a.flags = flags;
    a.quant = quant;
    a.x = &x;
    a.x_scales = has_x_scales ? &x_scales : nullptr;
    a.topk_weights = has_weights ? &weights : nullptr;
    a.out_x = &out_x;
    a.out_scales = has_out_scales ? &out_scales : nullptr;
    a.out_topk_idx = has_out_idx ? &out_idx : nullptr;
    a.out_topk_weights = has_out_weights ? &out_weights : nullptr;
    a.out_expert_counts = has_counts ? &counts : nullptr;
    a.out_num_recv = has_num_recv ? &num_recv : nullptr;
    a.send_sms = send_sms;
    a.reserved0 = reserved0;
    if (extra != nullptr) extra(a, counts);
    return epc_dispatch(handle, &a, stream);
  }
};

// A valid bf16 dispatch with every optional output.
DispatchCall valid_dispatch(const HtBuffers& b) {
  DispatchCall c;
  c.x = b.x();
  c.x_scales = b.x_scales();
  c.weights = b.topk_weights();
  c.out_x = b.out_x();
  c.out_scales = b.out_scales();
  c.out_idx = b.out_topk_idx();
  c.out_weights = b.out_topk_weights();
  c.counts = b.out_expert_counts();
  c.num_recv = b.out_num_recv();
  return c;
}

// Turns a valid bf16 dispatch into a valid fp8 one: e4m3 x and out_x, x_scales, out_scales.
void make_fp8(DispatchCall& c) {
  c.quant = EPC_QUANT_PASSTHROUGH;
  c.x.dtype = EPC_DTYPE_FP8_E4M3;
  c.out_x.dtype = EPC_DTYPE_FP8_E4M3;
  c.has_x_scales = true;
  c.has_out_scales = true;
}

// A malformed call: what it is, the status, what the message must mention, and how it
// differs from a valid call.
template <typename Call>
struct BadCall {
  const char* what;
  EpcStatus status;
  const char* part;
  void (*spoil)(Call&);
};

// One epc_combine call's arguments; has_* false passes NULL.
struct CombineCall {
  EpcTensor x, weights, out, out_weights;
  EpcTensor home{};  // home_topk_weights, passed where has_home
  bool has_weights = true, has_out_weights = true, has_home = false;
  uint32_t flags = 0;
  EpcWeighting weighting = EPC_WEIGHTING_DEFAULT;
  uint32_t send_sms = 0, reserved0 = 0;

  EpcStatus run(EpcHandle* handle, cudaStream_t stream) const {
    EpcCombineArgs a = EPC_COMBINE_ARGS_INIT;
    a.flags = flags;
    a.send_sms = send_sms;
    a.reserved0 = reserved0;
    a.weighting = weighting;
    a.x = &x;
    a.topk_weights = has_weights ? &weights : nullptr;
    a.out = &out;
    a.out_topk_weights = has_out_weights ? &out_weights : nullptr;
    a.home_topk_weights = has_home ? &home : nullptr;
    return epc_combine(handle, &a, stream);
  }
};

CombineCall valid_combine(const HtBuffers& b) { return CombineCall{b.combine_x(), b.combine_w(), b.out(), b.out_w()}; }

// Handle creation: configuration, out-parameter, routing. Nothing is written on failure.
void expect_bad_creations(EpcGroup* group, EpcGroup* ll_group, const HtShape& shape, const EpcTensor& idx,
                          void* scratch, int K, cudaStream_t s) {
  EpcHandle* const sentinel = reinterpret_cast<EpcHandle*>(0x10);
  EpcHandle* handle = sentinel;
  EpcRouting routing = EPC_ROUTING_INIT;
  routing.topk_idx = &idx;
  auto create = [&](EpcGroup* g, const EpcHandleConfig& config, const EpcRouting* r) {
    return epc_handle_create(g, &config, r, s, &handle);
  };
  EpcHandleConfig c = handle_config();
  c.sizing = 2;
  expect_invalid(create(group, c, &routing), "EpcHandleConfig.sizing", "sizing 2");
  c = handle_config(EPC_SIZING_EXACT);
  c.capacity = static_cast<uint64_t>(shape.max_rows());
  expect_invalid(create(group, c, &routing), "EpcHandleConfig.capacity", "capacity with EXACT sizing");
  c = handle_config();
  c.capacity = static_cast<uint64_t>(shape.max_rows()) + 1;
  expect_invalid(create(group, c, &routing), "EpcHandleConfig.capacity", "capacity above recv_capacity");
  c = handle_config();
  c.layout = EPC_LAYOUT_EXPERT_PACKED;
  c.capacity = 1;
  expect_status(create(group, c, &routing), EPC_ERR_UNSUPPORTED, "EpcHandleConfig.capacity",
                "EXPERT_PACKED capacity other than its default");
  c = handle_config();
  c.layout = 5;
  expect_invalid(create(group, c, &routing), "EpcHandleConfig.layout", "layout 5");
  c = handle_config();
  c.expert_alignment = 16;
  expect_invalid(create(group, c, &routing), "EpcHandleConfig.expert_alignment", "expert_alignment on FLAT");
  c = handle_config(EPC_SIZING_CAPACITY, EPC_HANDLE_ZERO_PADDING);
  expect_invalid(create(group, c, &routing), "EPC_HANDLE_ZERO_PADDING", "ZERO_PADDING on FLAT");
  c = handle_config(EPC_SIZING_CAPACITY, 0x100u);
  expect_invalid(create(group, c, &routing), "EpcHandleConfig.flags", "handle flags 0x100");
  for (EpcLayout layout : {EPC_LAYOUT_EXPERT_PADDED, EPC_LAYOUT_RANK_MAJOR}) {
    c = handle_config();
    c.layout = layout;
    expect_status(create(group, c, &routing), EPC_ERR_UNSUPPORTED, "EpcHandleConfig.layout",
                  "layout " + std::to_string(layout) + " on an HT group");
  }
  c = handle_config();
  c.layout = EPC_LAYOUT_EXPERT_PACKED;
  expect_status(create(ll_group, c, &routing), EPC_ERR_UNSUPPORTED, "EpcHandleConfig.layout",
                "EXPERT_PACKED on an LL group");
  c = handle_config(EPC_SIZING_EXACT);
  c.layout = EPC_LAYOUT_FLAT;
  expect_status(create(ll_group, c, &routing), EPC_ERR_UNSUPPORTED, "EpcHandleConfig.sizing",
                "EXACT on an LL group (FLAT)");
  c = handle_config(EPC_SIZING_EXACT);
  expect_invalid(create(ll_group, c, &routing), "EpcHandleConfig.sizing", "EXACT on an LL group (EXPERT_PADDED)");
  expect_invalid(epc_handle_create(group, nullptr, &routing, s, nullptr), "out_handle", "out_handle NULL");
  EpcRouting no_idx = EPC_ROUTING_INIT;
  expect_invalid(create(group, handle_config(), &no_idx), "EpcRouting.topk_idx", "topk_idx NULL");
  EpcRouting with_count = routing;
  const EpcTensor count = make_tensor(scratch, EPC_DTYPE_INT32, {1});
  with_count.num_tokens = &count;
  expect_status(create(group, handle_config(), &with_count), EPC_ERR_UNSUPPORTED, "EpcRouting.num_tokens",
                "EpcRouting.num_tokens");
  auto bad_idx = [&](EpcDtype dtype, int64_t tokens, int64_t topk, const std::string& what) {
    const EpcTensor bad = make_tensor(scratch, dtype, {tokens, topk});
    EpcRouting r = EPC_ROUTING_INIT;
    r.topk_idx = &bad;
    expect_invalid(create(group, handle_config(), &r), "topk_idx", what);
  };
  bad_idx(EPC_DTYPE_FP32, 32, K, "topk_idx fp32");
  bad_idx(EPC_DTYPE_INT64, shape.max_tokens + 1, K, "topk_idx with B > max_tokens_per_rank");
  bad_idx(EPC_DTYPE_INT64, 32, shape.max_topk + 1, "topk_idx with K > max_topk");
  EXPECT_EQ(handle, sentinel) << "out_handle written by a failing call";
}

// L = 8, H = 1024, T = 64, max_topk 8; the handles' routing has K = 4 and B = 32 on every rank.
TEST(HighThroughputErrors, BadArgumentsAreRejectedAndChangeNothing) {
  constexpr int K = 4;
  const HtShape shape = world_shape(8, 1024, 64, 8);
  GroupPtr group, ll_group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, ll_group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  ProblemSpec spec;
  spec.topk = K;
  spec.seed = 40000;
  spec.tokens = 32;
  spec.masked_fraction = 0.1;
  const HtStep step = make_step(make_problem(shape, spec), 40001, my_rank());
  HtBuffers exact_buffers, capacity_buffers;
  ASSERT_TRUE(exact_buffers.allocate(shape, K));
  ASSERT_TRUE(capacity_buffers.allocate(shape, K));
  const CallOptions options;
  ASSERT_TRUE(exact_buffers.upload(step, options, s));
  ASSERT_TRUE(capacity_buffers.upload(step, options, s));
  // Backs every malformed tensor below, so that nothing reads past an allocation even if a
  // check were missing.
  DeviceMemory scratch;
  ASSERT_TRUE(scratch.allocate(8u << 20, "scratch"));
  ASSERT_TRUE(cuda_ok(cudaMemsetAsync(scratch.get(), 0, scratch.bytes(), s), "clear scratch"));

  const EpcTensor idx = exact_buffers.topk_idx();
  expect_bad_creations(group.get(), ll_group.get(), shape, idx, scratch.get(), K, s);

  // Valid handles of both sizings and a low-latency one.
  HandlePtr exact, capacity, ll_handle;
  ASSERT_TRUE(create_handle(group.get(), exact_buffers, EPC_SIZING_EXACT, s, exact));
  ASSERT_TRUE(create_handle(group.get(), capacity_buffers, EPC_SIZING_CAPACITY, s, capacity));
  ASSERT_TRUE(create_handle_with(ll_group.get(), handle_config(), &idx, s, ll_handle, "epc_handle_create(LL)"));

  // ---- HT arguments on an LL handle, NULL handles and args, complete on HT ----
  const DispatchCall good = valid_dispatch(exact_buffers);
  const CombineCall good_combine = valid_combine(exact_buffers);
  {
    DispatchCall flat = good;  // [rows, H] out_x on an LL handle, whose out_x is [L, C, H]
    flat.has_out_idx = flat.has_out_weights = flat.has_counts = flat.has_num_recv = false;
    expect_invalid(flat.run(ll_handle.get(), s), "EpcDispatchArgs.out_x", "an HT out_x on an LL handle");
    flat.has_out_idx = true;
    flat.out_x = make_tensor(scratch.get(), EPC_DTYPE_BF16, {8, shape.max_rows(), shape.hidden});
    expect_invalid(flat.run(ll_handle.get(), s), "EpcDispatchArgs.out_topk_idx", "out_topk_idx on an LL handle");
  }
  expect_invalid(good.run(nullptr, s), "handle", "epc_dispatch with a NULL handle");
  expect_invalid(epc_dispatch(exact.get(), nullptr, s), "EpcDispatchArgs", "epc_dispatch with NULL args");
  expect_invalid(epc_combine(exact.get(), nullptr, s), "EpcCombineArgs", "epc_combine with NULL args");
  expect_status(epc_complete(exact.get(), 0, s), EPC_ERR_INVALID_USAGE, "epc_complete", "epc_complete on an HT handle");

  // ---- epc_dispatch ----
  const BadCall<DispatchCall> bad_dispatches[] = {
      {"x_scales with bf16 x", EPC_ERR_INVALID_ARGUMENT, "x_scales", [](DispatchCall& c) { c.has_x_scales = true; }},
      {"out_scales with bf16 x", EPC_ERR_INVALID_ARGUMENT, "out_scales",
       [](DispatchCall& c) { c.has_out_scales = true; }},
      {"out_topk_weights without topk_weights", EPC_ERR_INVALID_ARGUMENT, "out_topk_weights",
       [](DispatchCall& c) { c.has_weights = false; }},
      {"PASSTHROUGH without x_scales", EPC_ERR_INVALID_ARGUMENT, "x_scales",
       [](DispatchCall& c) {
         make_fp8(c);
         c.has_x_scales = false;
       }},
      {"PASSTHROUGH without out_scales", EPC_ERR_INVALID_ARGUMENT, "out_scales",
       [](DispatchCall& c) {
         make_fp8(c);
         c.has_out_scales = false;
       }},
      {"e5m2 x with PASSTHROUGH (not served)", EPC_ERR_UNSUPPORTED, "EPC_QUANT_PASSTHROUGH",
       [](DispatchCall& c) {
         make_fp8(c);
         c.x.dtype = EPC_DTYPE_FP8_E5M2;
         c.out_x.dtype = EPC_DTYPE_FP8_E5M2;
       }},
      {"x_scales [B, S + 1] with out_scales [rows, S]", EPC_ERR_INVALID_ARGUMENT, "out_scales",
       [](DispatchCall& c) {
         make_fp8(c);
         c.x_scales.shape[1] += 1;
       }},
      {"fp8 x without PASSTHROUGH", EPC_ERR_INVALID_ARGUMENT, "EpcDispatchArgs.x ",
       [](DispatchCall& c) { c.x.dtype = EPC_DTYPE_FP8_E4M3; }},
      {"x with B + 1 rows", EPC_ERR_INVALID_ARGUMENT, "EpcDispatchArgs.x ", [](DispatchCall& c) { c.x.shape[0] += 1; }},
      {"x with H - 8 channels", EPC_ERR_INVALID_ARGUMENT, "EpcDispatchArgs.x ",
       [](DispatchCall& c) { c.x.shape[1] -= 8; }},
      {"topk_weights [B, K + 1]", EPC_ERR_INVALID_ARGUMENT, "topk_weights",
       [](DispatchCall& c) { c.weights.shape[1] += 1; }},
      {"out_x [rows + 1, H] on an EXACT handle", EPC_ERR_INVALID_ARGUMENT, "out_x",
       [](DispatchCall& c) { c.out_x.shape[0] += 1; }},
      {"fp8 out_x for bf16 x", EPC_ERR_INVALID_ARGUMENT, "out_x",
       [](DispatchCall& c) { c.out_x.dtype = EPC_DTYPE_FP8_E4M3; }},
      {"out_topk_idx [rows, K + 1]", EPC_ERR_INVALID_ARGUMENT, "out_topk_idx",
       [](DispatchCall& c) { c.out_idx.shape[1] += 1; }},
      {"out_topk_idx int64", EPC_ERR_INVALID_ARGUMENT, "out_topk_idx",
       [](DispatchCall& c) { c.out_idx.dtype = EPC_DTYPE_INT64; }},
      {"out_topk_weights bf16", EPC_ERR_INVALID_ARGUMENT, "out_topk_weights",
       [](DispatchCall& c) { c.out_weights.dtype = EPC_DTYPE_BF16; }},
      {"out_expert_counts [L + 1]", EPC_ERR_INVALID_ARGUMENT, "out_expert_counts",
       [](DispatchCall& c) { c.counts.shape[0] += 1; }},
      {"out_num_recv [2]", EPC_ERR_INVALID_ARGUMENT, "out_num_recv", [](DispatchCall& c) { c.num_recv.shape[0] = 2; }},
      {"acc_expert_counts int32", EPC_ERR_INVALID_ARGUMENT, "acc_expert_counts",
       [](DispatchCall& c) {
         c.extra = [](EpcDispatchArgs& a, const EpcTensor& counts) { a.acc_expert_counts = &counts; };
       }},
      {"out_expert_counts_host in device memory", EPC_ERR_INVALID_ARGUMENT, "out_expert_counts_host",
       [](DispatchCall& c) {
         c.extra = [](EpcDispatchArgs& a, const EpcTensor& counts) { a.out_expert_counts_host = &counts; };
       }},
      {"out_expert_offsets on FLAT", EPC_ERR_INVALID_ARGUMENT, "out_expert_offsets",
       [](DispatchCall& c) {
         c.extra = [](EpcDispatchArgs& a, const EpcTensor& counts) { a.out_expert_offsets = &counts; };
       }},
      {"out_rank_counts on FLAT", EPC_ERR_INVALID_ARGUMENT, "out_rank_counts",
       [](DispatchCall& c) {
         c.extra = [](EpcDispatchArgs& a, const EpcTensor& counts) { a.out_rank_counts = &counts; };
       }},
      {"send_sms above the group's num_sms (24)", EPC_ERR_INVALID_ARGUMENT, "EpcDispatchArgs.send_sms",
       [](DispatchCall& c) { c.send_sms = 25; }},
      {"reserved0 non-zero", EPC_ERR_ABI_MISMATCH, "EpcDispatchArgs.reserved0",
       [](DispatchCall& c) { c.reserved0 = 1; }},
      {"flags EPC_DISPATCH_POW2_SCALES without FP8", EPC_ERR_INVALID_ARGUMENT, "EPC_DISPATCH_POW2_SCALES",
       [](DispatchCall& c) { c.flags = EPC_DISPATCH_POW2_SCALES; }},
      {"flags 0x100", EPC_ERR_INVALID_ARGUMENT, "EpcDispatchArgs.flags", [](DispatchCall& c) { c.flags = 0x100u; }},
      {"quant FP8 (not served on HT)", EPC_ERR_UNSUPPORTED, "EPC_QUANT_FP8",
       [](DispatchCall& c) { c.quant = EPC_QUANT_FP8; }},
      {"quant NVFP4 (not served)", EPC_ERR_UNSUPPORTED, "EPC_QUANT_NVFP4",
       [](DispatchCall& c) { c.quant = EPC_QUANT_NVFP4; }},
      {"quant 7", EPC_ERR_INVALID_ARGUMENT, "EpcDispatchArgs.quant", [](DispatchCall& c) { c.quant = 7; }},
  };
  for (const BadCall<DispatchCall>& bad : bad_dispatches) {
    DispatchCall c = good;
    bad.spoil(c);
    expect_status(c.run(exact.get(), s), bad.status, bad.part, std::string("epc_dispatch: ") + bad.what);
  }

  // ---- epc_combine ----
  const BadCall<CombineCall> bad_combines[] = {
      {"topk_weights without out_topk_weights", EPC_ERR_INVALID_ARGUMENT, "topk_weights",
       [](CombineCall& c) { c.has_out_weights = false; }},
      {"out_topk_weights without topk_weights", EPC_ERR_INVALID_ARGUMENT, "topk_weights",
       [](CombineCall& c) { c.has_weights = false; }},
      {"topk_weights [rows, K + 1]", EPC_ERR_INVALID_ARGUMENT, "topk_weights",
       [](CombineCall& c) { c.weights.shape[1] += 1; }},
      {"out_topk_weights [B, K + 1]", EPC_ERR_INVALID_ARGUMENT, "out_topk_weights",
       [](CombineCall& c) { c.out_weights.shape[1] += 1; }},
      {"x [rows + 1, H]", EPC_ERR_INVALID_ARGUMENT, "EpcCombineArgs.x ", [](CombineCall& c) { c.x.shape[0] += 1; }},
      {"fp16 x (not served)", EPC_ERR_UNSUPPORTED, "EpcCombineArgs.x",
       [](CombineCall& c) { c.x.dtype = EPC_DTYPE_FP16; }},
      {"out [B + 1, H]", EPC_ERR_INVALID_ARGUMENT, "EpcCombineArgs.out ", [](CombineCall& c) { c.out.shape[0] += 1; }},
      {"int32 out", EPC_ERR_INVALID_ARGUMENT, "EpcCombineArgs.out ",
       [](CombineCall& c) { c.out.dtype = EPC_DTYPE_INT32; }},
      {"weighting SENDER on FLAT", EPC_ERR_INVALID_ARGUMENT, "EpcCombineArgs.weighting",
       [](CombineCall& c) { c.weighting = EPC_WEIGHTING_SENDER; }},
      {"weighting HOME on FLAT", EPC_ERR_INVALID_ARGUMENT, "EpcCombineArgs.weighting",
       [](CombineCall& c) {
         c.weighting = EPC_WEIGHTING_HOME;
         c.home = c.out_weights;  // [B, K] fp32
         c.has_home = true;
       }},
      {"weighting HOME without home_topk_weights", EPC_ERR_INVALID_ARGUMENT, "EpcCombineArgs.home_topk_weights",
       [](CombineCall& c) { c.weighting = EPC_WEIGHTING_HOME; }},
      {"weighting 9", EPC_ERR_INVALID_ARGUMENT, "EpcCombineArgs.weighting", [](CombineCall& c) { c.weighting = 9; }},
      {"send_sms above the group's num_sms (24)", EPC_ERR_INVALID_ARGUMENT, "EpcCombineArgs.send_sms",
       [](CombineCall& c) { c.send_sms = 25; }},
      {"reserved0 non-zero", EPC_ERR_ABI_MISMATCH, "EpcCombineArgs.reserved0", [](CombineCall& c) { c.reserved0 = 1; }},
      {"flags 0x100", EPC_ERR_INVALID_ARGUMENT, "EpcCombineArgs.flags", [](CombineCall& c) { c.flags = 0x100u; }},
  };
  for (const BadCall<CombineCall>& bad : bad_combines) {
    CombineCall c = good_combine;
    bad.spoil(c);
    expect_status(c.run(exact.get(), s), bad.status, bad.part, std::string("epc_combine: ") + bad.what);
  }

  // ---- epc_handle_update ----
  expect_invalid(epc_handle_update(capacity.get(), nullptr, s), "EpcRouting", "epc_handle_update without routing");
  {
    const EpcTensor wider = make_tensor(scratch.get(), EPC_DTYPE_INT64, {32, K + 1});
    expect_invalid(update_routing(capacity.get(), wider, s), "topk_idx", "epc_handle_update with another K");
    const EpcTensor longer = make_tensor(scratch.get(), EPC_DTYPE_INT64, {shape.max_tokens + 1, K});
    expect_invalid(update_routing(capacity.get(), longer, s), "topk_idx",
                   "epc_handle_update with B > max_tokens_per_rank");
  }

  // Nothing was queued or half done: both handles still give exact results.
  ASSERT_TRUE(dispatch_and_combine(exact.get(), exact_buffers, s));
  exact_buffers.check(step, s, "EXACT handle after the rejected calls");
  ASSERT_TRUE(update_handle(capacity.get(), capacity_buffers, s));
  ASSERT_TRUE(dispatch_and_combine(capacity.get(), capacity_buffers, s));
  capacity_buffers.check(step, s, "CAPACITY handle after the rejected calls");
}

// EPC_WEIGHTING_HOME on EXPERT_PACKED handles where it cannot be served: on a group without
// EPC_GROUP_COMBINE_PER_ENTRY (INVALID_ARGUMENT naming the flag), and with home_topk_weights
// of the wrong shape or dtype on a group with it. Nothing is written: out keeps its poison
// until a valid call.
TEST(HighThroughputErrors, WeightsAtHomeWhereTheyCannotBeServed) {
  constexpr int K = 4;
  const HtShape shape = world_shape(8, 1024, 64, 8);
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  ProblemSpec spec;
  spec.topk = K;
  spec.seed = 40100;
  spec.tokens = 32;
  const ref::Problem p = make_problem(shape, spec);
  const ref::RankTokens& mine = p.ranks[my_rank()];
  const int64_t B = mine.num_tokens, H = shape.hidden;
  for (const bool per_entry : {false, true}) {
    const std::string label = per_entry ? "per-entry group" : "group without EPC_GROUP_COMBINE_PER_ENTRY";
    GroupPtr group;
    ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group, EPC_DTYPE_BF16,
                             per_entry ? EPC_GROUP_COMBINE_PER_ENTRY : 0u));
    DeviceMemory idx, x, home, out, scratch;
    ASSERT_TRUE(idx.allocate(mine.topk_idx.size() * 8, "topk_idx"));
    ASSERT_TRUE(upload_bytes(idx.get(), mine.topk_idx.data(), mine.topk_idx.size() * 8, s, "topk_idx"));
    const EpcTensor idx_t = make_tensor(idx.get(), EPC_DTYPE_INT64, {B, K});
    EpcHandleConfig hc = handle_config(EPC_SIZING_EXACT);
    hc.layout = EPC_LAYOUT_EXPERT_PACKED;
    HandlePtr handle;
    ASSERT_TRUE(create_handle_with(group.get(), hc, &idx_t, s, handle, label));
    EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
    ASSERT_TRUE(query_handle(handle.get(), info));
    const int64_t rows = info.rows;
    ASSERT_TRUE(x.allocate(std::max<size_t>(1, size_t(rows) * H * 2), "x"));
    ASSERT_TRUE(scratch.allocate(size_t(B) * H * 2, "dispatch x"));
    ASSERT_TRUE(home.allocate(size_t(B + 1) * (K + 1) * 4, "home weights"));
    ASSERT_TRUE(out.allocate(size_t(B) * H * 2, "out"));
    for (DeviceMemory* m : {&x, &scratch, &home}) {
      ASSERT_TRUE(cuda_ok(cudaMemsetAsync(m->get(), 0, m->bytes(), s), "clear"));
    }
    ASSERT_TRUE(cuda_ok(cudaMemsetAsync(out.get(), 0xFF, out.bytes(), s), "poison out"));
    // A dispatch first: EXPERT_PACKED combine sums the rows it gave each entry.
    const EpcTensor dx_t = make_tensor(scratch.get(), EPC_DTYPE_BF16, {B, H});
    const EpcTensor x_t = make_tensor(x.get(), EPC_DTYPE_BF16, {rows, H});
    EpcDispatchArgs da = EPC_DISPATCH_ARGS_INIT;
    da.x = &dx_t;
    da.out_x = &x_t;
    ASSERT_EQ(epc_dispatch(handle.get(), &da, s), EPC_OK) << label << ": " << last_error();
    const EpcTensor out_t = make_tensor(out.get(), EPC_DTYPE_BF16, {B, H});
    auto combine = [&](const EpcTensor& home_t) {
      EpcCombineArgs a = EPC_COMBINE_ARGS_INIT;
      a.weighting = EPC_WEIGHTING_HOME;
      a.x = &x_t;
      a.out = &out_t;
      a.home_topk_weights = &home_t;
      return epc_combine(handle.get(), &a, s);
    };
    const EpcTensor good = make_tensor(home.get(), EPC_DTYPE_FP32, {B, K});
    if (!per_entry) {
      expect_invalid(combine(good), "EpcGroupConfig.flags", label + ": HOME");
    } else {
      expect_invalid(combine(make_tensor(home.get(), EPC_DTYPE_FP32, {B, K + 1})), "EpcCombineArgs.home_topk_weights",
                     label + ": home_topk_weights [B, K + 1]");
      expect_invalid(combine(make_tensor(home.get(), EPC_DTYPE_FP32, {B + 1, K})), "EpcCombineArgs.home_topk_weights",
                     label + ": home_topk_weights [B + 1, K]");
      expect_invalid(combine(make_tensor(home.get(), EPC_DTYPE_INT32, {B, K})), "EpcCombineArgs.home_topk_weights",
                     label + ": int32 home_topk_weights");
    }
    std::vector<uint16_t> got(size_t(B) * H);
    ASSERT_TRUE(download_and_wait({{got.data(), out.get(), got.size() * 2, "out"}}, s));
    EXPECT_EQ(std::count(got.begin(), got.end(), uint16_t{0xFFFF}), static_cast<long>(got.size()))
        << label << ": a refused combine wrote out";
    if (!per_entry) continue;
    ASSERT_EQ(combine(good), EPC_OK) << label << ": " << last_error();  // zero rows, zero weights: +0
    ASSERT_TRUE(download_and_wait({{got.data(), out.get(), got.size() * 2, "out"}}, s));
    EXPECT_EQ(std::count(got.begin(), got.end(), uint16_t{0}), static_cast<long>(got.size())) << label;
  }
}

}  // namespace
}  // namespace epc::gputest::ht
