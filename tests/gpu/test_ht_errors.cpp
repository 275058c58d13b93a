// SPDX-License-Identifier: Apache-2.0
// Bad arguments to the high-throughput calls: EPC_ERR_INVALID_ARGUMENT with a message naming
// the offending argument, nothing written to out-parameters, nothing queued (every rank makes
// the same bad calls, and the handles still give exact results afterwards).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest::ht {
namespace {

// `status` must be EPC_ERR_INVALID_ARGUMENT and the message must contain `part`. Call it
// directly on the epc_* call's result (the message is read at once).
void expect_invalid(EpcStatus status, const std::string& part, const std::string& what) {
  const std::string message = last_error();
  EXPECT_EQ(status, EPC_ERR_INVALID_ARGUMENT) << what << ": got " << epc_status_string(status) << ": " << message;
  EXPECT_NE(message.find(part), std::string::npos)
      << what << ": the message should mention \"" << part << "\": " << message;
}

// One epc_ht_dispatch call's arguments; has_* false passes NULL.
struct DispatchCall {
  EpcTensor x, x_scales, weights, out_x, out_scales, out_idx, out_weights, counts, num_recv;
  bool has_x_scales = false, has_weights = true, has_out_scales = false, has_out_idx = true, has_out_weights = true,
       has_counts = true, has_num_recv = true;
  EpcFlags flags = 0;

  EpcStatus run(EpcHandle* handle, cudaStream_t stream) const {
    return epc_ht_dispatch(handle, &x, has_x_scales ? &x_scales : nullptr, has_weights ? &weights : nullptr, &out_x,
                           has_out_scales ? &out_scales : nullptr, has_out_idx ? &out_idx : nullptr,
                           has_out_weights ? &out_weights : nullptr, has_counts ? &counts : nullptr,
                           has_num_recv ? &num_recv : nullptr, flags, stream);
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
  c.x.dtype = EPC_DTYPE_FP8_E4M3;
  c.out_x.dtype = EPC_DTYPE_FP8_E4M3;
  c.has_x_scales = true;
  c.has_out_scales = true;
}

// A malformed call: what it is, what the message must mention, and how it differs from a
// valid call.
template <typename Call>
struct BadCall {
  const char* what;
  const char* part;
  void (*spoil)(Call&);
};

// One epc_ht_combine call's arguments; has_* false passes NULL.
struct CombineCall {
  EpcTensor x, weights, out, out_weights;
  bool has_weights = true, has_out_weights = true;
  EpcFlags flags = EPC_FLAG_BACKWARD_WEIGHTS;

  EpcStatus run(EpcHandle* handle, cudaStream_t stream) const {
    return epc_ht_combine(handle, &x, has_weights ? &weights : nullptr, &out, has_out_weights ? &out_weights : nullptr,
                          flags, stream);
  }
};

CombineCall valid_combine(const HtBuffers& b) { return CombineCall{b.combine_x(), b.combine_w(), b.out(), b.out_w()}; }

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

  // ---- Handle creation: mode, sizing, out-parameters, routing ----
  const EpcTensor idx = exact_buffers.topk_idx();
  EpcHandle* const sentinel = reinterpret_cast<EpcHandle*>(0x10);
  EpcHandle* handle = sentinel;
  int64_t rows = -7;
  expect_invalid(epc_handle_create(group.get(), &idx, s, &handle), "high-throughput",
                 "epc_handle_create on an HT group");
  expect_invalid(epc_ht_handle_create(ll_group.get(), &idx, EPC_HT_SIZING_EXACT, s, &handle, &rows), "low-latency",
                 "epc_ht_handle_create on an LL group");
  expect_invalid(epc_ht_handle_create(group.get(), &idx, 2u, s, &handle, &rows), "sizing", "sizing 2");
  expect_invalid(epc_ht_handle_create(group.get(), &idx, EPC_HT_SIZING_EXACT, s, &handle, nullptr), "out_rows",
                 "out_rows NULL");
  expect_invalid(epc_ht_handle_create(group.get(), &idx, EPC_HT_SIZING_EXACT, s, nullptr, &rows), "out_handle",
                 "out_handle NULL");
  expect_invalid(epc_ht_handle_create(group.get(), nullptr, EPC_HT_SIZING_EXACT, s, &handle, &rows), "topk_idx",
                 "topk_idx NULL");
  auto bad_create = [&](EpcDtype dtype, int64_t tokens, int64_t topk, const std::string& what) {
    const EpcTensor bad = make_tensor(scratch.get(), dtype, {tokens, topk});
    expect_invalid(epc_ht_handle_create(group.get(), &bad, EPC_HT_SIZING_CAPACITY, s, &handle, &rows), "topk_idx",
                   what);
  };
  bad_create(EPC_DTYPE_FP32, 32, K, "topk_idx fp32");
  bad_create(EPC_DTYPE_INT64, shape.max_tokens + 1, K, "topk_idx with B > max_tokens_per_rank");
  bad_create(EPC_DTYPE_INT64, 32, shape.max_topk + 1, "topk_idx with K > max_topk");
  EXPECT_EQ(handle, sentinel) << "out_handle written by a failing call";
  EXPECT_EQ(rows, -7) << "out_rows written by a failing call";

  // Valid handles of both sizings and a low-latency one.
  HandlePtr exact, capacity, ll_handle;
  ASSERT_TRUE(create_handle(group.get(), exact_buffers, EPC_HT_SIZING_EXACT, s, exact));
  ASSERT_TRUE(create_handle(group.get(), capacity_buffers, EPC_HT_SIZING_CAPACITY, s, capacity));
  {
    EpcHandle* raw = nullptr;
    ASSERT_TRUE(epc_ok(epc_handle_create(ll_group.get(), &idx, s, &raw), "epc_handle_create(LL)"));
    ll_handle.reset(raw);
  }

  // ---- The wrong mode's calls ----
  const DispatchCall good = valid_dispatch(exact_buffers);
  const CombineCall good_combine = valid_combine(exact_buffers);
  expect_invalid(good.run(ll_handle.get(), s), "low-latency", "epc_ht_dispatch on an LL handle");
  expect_invalid(good_combine.run(ll_handle.get(), s), "low-latency", "epc_ht_combine on an LL handle");
  expect_invalid(good.run(nullptr, s), "handle", "epc_ht_dispatch with a NULL handle");
  {
    const EpcTensor x = exact_buffers.x(), w = exact_buffers.topk_weights(),
                    out_x = make_tensor(scratch.get(), EPC_DTYPE_BF16, {8, 128, 1024}),
                    counts = make_tensor(scratch.get(), EPC_DTYPE_INT32, {8});
    expect_invalid(epc_ll_dispatch(exact.get(), &x, &w, &out_x, &counts, 0, s), "high-throughput",
                   "epc_ll_dispatch on an HT handle");
    expect_invalid(epc_ll_combine(exact.get(), &out_x, &x, 0, s), "high-throughput", "epc_ll_combine on an HT handle");
    expect_invalid(epc_complete(exact.get(), s), "high-throughput", "epc_complete on an HT handle");
  }

  // ---- epc_ht_dispatch ----
  const BadCall<DispatchCall> bad_dispatches[] = {
      {"x_scales with bf16 x", "x_scales", [](DispatchCall& c) { c.has_x_scales = true; }},
      {"out_scales with bf16 x", "out_scales", [](DispatchCall& c) { c.has_out_scales = true; }},
      {"out_topk_weights without topk_weights", "out_topk_weights", [](DispatchCall& c) { c.has_weights = false; }},
      {"fp8 x without x_scales", "x_scales",
       [](DispatchCall& c) {
         make_fp8(c);
         c.has_x_scales = false;
       }},
      {"fp8 x without out_scales", "out_scales",
       [](DispatchCall& c) {
         make_fp8(c);
         c.has_out_scales = false;
       }},
      {"x_scales [B, H/128 + 1]", "x_scales",
       [](DispatchCall& c) {
         make_fp8(c);
         c.x_scales.shape[1] += 1;
       }},
      {"x with B + 1 rows", "tensor x ", [](DispatchCall& c) { c.x.shape[0] += 1; }},
      {"x with H - 8 channels", "tensor x ", [](DispatchCall& c) { c.x.shape[1] -= 8; }},
      {"fp16 x on a bf16 group", "tensor x ", [](DispatchCall& c) { c.x.dtype = EPC_DTYPE_FP16; }},
      {"topk_weights [B, K + 1]", "topk_weights", [](DispatchCall& c) { c.weights.shape[1] += 1; }},
      {"out_x [rows + 1, H] on an EXACT handle", "out_x", [](DispatchCall& c) { c.out_x.shape[0] += 1; }},
      {"fp8 out_x for bf16 x", "out_x", [](DispatchCall& c) { c.out_x.dtype = EPC_DTYPE_FP8_E4M3; }},
      {"out_topk_idx [rows, K + 1]", "out_topk_idx", [](DispatchCall& c) { c.out_idx.shape[1] += 1; }},
      {"out_topk_idx int64", "out_topk_idx", [](DispatchCall& c) { c.out_idx.dtype = EPC_DTYPE_INT64; }},
      {"out_topk_weights bf16", "out_topk_weights", [](DispatchCall& c) { c.out_weights.dtype = EPC_DTYPE_BF16; }},
      {"out_expert_counts [L + 1]", "out_expert_counts", [](DispatchCall& c) { c.counts.shape[0] += 1; }},
      {"out_num_recv [2]", "out_num_recv", [](DispatchCall& c) { c.num_recv.shape[0] = 2; }},
      {"flags EPC_FLAG_SEND_ONLY", "flags", [](DispatchCall& c) { c.flags = EPC_FLAG_SEND_ONLY; }},
      {"flags EPC_FLAG_BACKWARD_WEIGHTS", "flags", [](DispatchCall& c) { c.flags = EPC_FLAG_BACKWARD_WEIGHTS; }},
      {"flags 0x100", "flags", [](DispatchCall& c) { c.flags = 0x100u; }},
  };
  for (const BadCall<DispatchCall>& bad : bad_dispatches) {
    DispatchCall c = good;
    bad.spoil(c);
    expect_invalid(c.run(exact.get(), s), bad.part, std::string("epc_ht_dispatch: ") + bad.what);
  }

  // ---- epc_ht_combine ----
  const BadCall<CombineCall> bad_combines[] = {
      {"EPC_FLAG_BACKWARD_WEIGHTS without topk_weights", "topk_weights", [](CombineCall& c) { c.has_weights = false; }},
      {"topk_weights without EPC_FLAG_BACKWARD_WEIGHTS", "topk_weights", [](CombineCall& c) { c.flags = 0; }},
      {"topk_weights [rows, K + 1]", "topk_weights", [](CombineCall& c) { c.weights.shape[1] += 1; }},
      {"out_topk_weights [B, K + 1]", "out_topk_weights", [](CombineCall& c) { c.out_weights.shape[1] += 1; }},
      {"x [rows + 1, H]", "tensor x ", [](CombineCall& c) { c.x.shape[0] += 1; }},
      {"fp16 x", "tensor x ", [](CombineCall& c) { c.x.dtype = EPC_DTYPE_FP16; }},
      {"out [B + 1, H]", "tensor out ", [](CombineCall& c) { c.out.shape[0] += 1; }},
      {"flags EPC_FLAG_SEND_ONLY", "flags", [](CombineCall& c) { c.flags |= EPC_FLAG_SEND_ONLY; }},
      {"flags 0x100", "flags", [](CombineCall& c) { c.flags |= 0x100u; }},
  };
  for (const BadCall<CombineCall>& bad : bad_combines) {
    CombineCall c = good_combine;
    bad.spoil(c);
    expect_invalid(c.run(exact.get(), s), bad.part, std::string("epc_ht_combine: ") + bad.what);
  }

  // ---- epc_handle_update ----
  expect_invalid(epc_handle_update(exact.get(), &idx, s), "EXACT", "epc_handle_update on an EXACT handle");
  {
    const EpcTensor wider = make_tensor(scratch.get(), EPC_DTYPE_INT64, {32, K + 1});
    expect_invalid(epc_handle_update(capacity.get(), &wider, s), "topk_idx", "epc_handle_update with another K");
    const EpcTensor longer = make_tensor(scratch.get(), EPC_DTYPE_INT64, {shape.max_tokens + 1, K});
    expect_invalid(epc_handle_update(capacity.get(), &longer, s), "topk_idx",
                   "epc_handle_update with B > max_tokens_per_rank");
  }

  // Nothing was queued or half done: both handles still give exact results.
  ASSERT_TRUE(dispatch_and_combine(exact.get(), exact_buffers, s));
  exact_buffers.check(step, s, "EXACT handle after the rejected calls");
  ASSERT_TRUE(update_handle(capacity.get(), capacity_buffers, s));
  ASSERT_TRUE(dispatch_and_combine(capacity.get(), capacity_buffers, s));
  capacity_buffers.check(step, s, "CAPACITY handle after the rejected calls");
}

}  // namespace
}  // namespace epc::gputest::ht
