// SPDX-License-Identifier: Apache-2.0
// Handles created without routing (ABI 2.0): created before any routing exists (a local
// call), routed later by epc_handle_update, also inside a CUDA graph capture (create before
// the capture; update, dispatch and combine captured; replays read new routing from the same
// device memory), and what epc_handle_query reports around all that: layout, sizing,
// capacity, rows (HT EXACT: the rows received, 0 before routing), B and K of the current
// routing, the pending send-only half, no overflow. Results are compared bit for bit with
// the CPU reference model, as in test_ll.cpp and test_ht.cpp.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest {
namespace {

// What epc_handle_query must say; `rows`, `tokens` and `topk` change with the routing.
struct WantInfo {
  EpcMode mode;
  EpcLayout layout;
  EpcSizing sizing;
  uint32_t flags;
  uint64_t capacity;
  int64_t rows;
  int tokens;
  int topk;
  uint32_t pending;
};

void expect_info(const EpcHandle* handle, const WantInfo& w, const std::string& when) {
  EpcHandleInfo info{};
  ASSERT_TRUE(query_handle(handle, info)) << when;
  EXPECT_EQ(info.struct_size, sizeof(EpcHandleInfo)) << when;
  EXPECT_EQ(info.mode, w.mode) << when;
  EXPECT_EQ(info.layout, w.layout) << when;
  EXPECT_EQ(info.sizing, w.sizing) << when;
  EXPECT_EQ(info.expert_alignment, 0u) << when;
  EXPECT_EQ(info.flags, w.flags) << when;
  EXPECT_EQ(info.capacity, w.capacity) << when;
  EXPECT_EQ(info.rows, w.rows) << when;
  EXPECT_EQ(info.num_tokens, static_cast<uint32_t>(w.tokens)) << when;
  EXPECT_EQ(info.topk, static_cast<uint32_t>(w.topk)) << when;
  EXPECT_EQ(info.pending, w.pending) << when;
  EXPECT_EQ(info.overflow_status, EPC_OK) << when;
  EXPECT_EQ(info.overflow_rank, -1) << when;
  EXPECT_EQ(info.overflow_rows, 0) << when;
}

// A handle of `config` without routing; a local call, so only this rank takes part.
::testing::AssertionResult create_unrouted(EpcGroup* group, const EpcHandleConfig& config, cudaStream_t stream,
                                           HandlePtr& out) {
  return create_handle_with(group, config, nullptr, stream, out, "epc_handle_create without routing");
}

// ---- Low latency --------------------------------------------------------------------------------

// Created without routing, then three steps each routed by epc_handle_update (new B every
// step); the query before and after, and around send-only halves.
TEST(RoutingLater, LowLatencyHandleRoutedByUpdate) {
  constexpr int K = 8;
  const Shape shape = world_shape(8, 1024, 32, K);
  const uint64_t C = static_cast<uint64_t>(shape.max_rows());
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  HandlePtr handle;
  ASSERT_TRUE(create_unrouted(group.get(), handle_config(), s, handle));
  WantInfo want{
      EPC_MODE_LOW_LATENCY, EPC_LAYOUT_EXPERT_PADDED, EPC_SIZING_CAPACITY, 0, C, static_cast<int64_t>(C), 0, 0,
      EPC_PENDING_NONE};
  expect_info(handle.get(), want, "LL, before any routing");

  ll::LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  for (int step_index = 0; step_index < 3; ++step_index) {
    const ll::LlStep step =
        ll::make_step(ll::random_problem(shape, K, 95000 + step_index, true, 0.1), 95100 + step_index, my_rank());
    ASSERT_TRUE(buffers.upload(step, s));
    ASSERT_TRUE(ll::update_handle(handle.get(), buffers, s));
    want.tokens = step.tokens();
    want.topk = K;
    const std::string label = "LL routed later, step " + std::to_string(step_index);
    expect_info(handle.get(), want, label + ", after the update");
    // Step 1 runs both halves send-only, the others plain.
    if (step_index == 1) {
      ASSERT_TRUE(epc_ok(ll::call_dispatch(handle.get(), buffers, EPC_STEP_SEND_ONLY, s), "send-only dispatch"));
      want.pending = EPC_PENDING_DISPATCH;
      expect_info(handle.get(), want, label + ", dispatch pending");
      ASSERT_TRUE(epc_ok(epc_complete(handle.get(), 0, s), "epc_complete (dispatch)"));
      want.pending = EPC_PENDING_NONE;
      expect_info(handle.get(), want, label + ", dispatch completed");
      ASSERT_TRUE(epc_ok(ll::call_combine(handle.get(), buffers, EPC_STEP_SEND_ONLY, s), "send-only combine"));
      want.pending = EPC_PENDING_COMBINE;
      expect_info(handle.get(), want, label + ", combine pending");
      ASSERT_TRUE(epc_ok(epc_complete(handle.get(), 0, s), "epc_complete (combine)"));
      want.pending = EPC_PENDING_NONE;
      expect_info(handle.get(), want, label + ", combine completed");
    } else {
      ASSERT_TRUE(ll::dispatch_and_combine(handle.get(), buffers, s));
    }
    buffers.check(step, s, label);
  }
}

// Created before the capture, never routed eagerly: the capture holds [update from the fixed
// routing buffer, dispatch (with host and accumulated counts), combine into fp32]; four
// replays with new routing, x, weights and y each (B = T: shapes are part of the graph),
// then an eager step on the same handle.
TEST(RoutingLater, LowLatencyFirstRoutedInsideGraphCapture) {
  constexpr int K = 8;
  const Shape shape = world_shape(16, 2048, 32, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  ll::LlOutputs outputs;
  outputs.out_dtype = EPC_DTYPE_FP32;
  outputs.counts_host = true;
  outputs.acc_counts = true;
  ll::LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K, EPC_DTYPE_INT32, outputs));
  auto step_for = [&](int i) {
    return ll::make_step(ll::random_problem(shape, K, 96000 + i, /*random_token_counts=*/false, 0.1), 96100 + i,
                         my_rank());
  };
  HandlePtr handle;
  ASSERT_TRUE(create_unrouted(group.get(), handle_config(), s, handle));
  // The routing buffer must hold a B = T routing's shape at capture; its values come later.
  const ll::LlStep first = step_for(0);
  ASSERT_TRUE(buffers.upload(first, s));
  ASSERT_TRUE(cuda_ok(cudaStreamSynchronize(s), "uploads before the capture"));
  GraphExecPtr exec;
  ASSERT_TRUE(capture_on_every_rank(
      s,
      [&] {
        ::testing::AssertionResult r = ll::update_handle(handle.get(), buffers, s);
        if (r) r = ll::dispatch_and_combine(handle.get(), buffers, s);
        return r;
      },
      exec));
  // The upload above stands for the first replay's dispatch.
  ASSERT_TRUE(cuda_ok(cudaGraphLaunch(exec.get(), s), "cudaGraphLaunch"));
  buffers.check(first, s, "graph replay 0 (the handle's first routing)");
  for (int i = 1; i <= 3; ++i) {
    const ll::LlStep step = step_for(i);
    ASSERT_TRUE(buffers.upload(step, s));
    ASSERT_TRUE(cuda_ok(cudaGraphLaunch(exec.get(), s), "cudaGraphLaunch"));
    buffers.check(step, s, "graph replay " + std::to_string(i));
  }
  const ll::LlStep after = step_for(4);
  ASSERT_TRUE(buffers.upload(after, s));
  ASSERT_TRUE(ll::update_handle(handle.get(), buffers, s));
  ASSERT_TRUE(ll::dispatch_and_combine(handle.get(), buffers, s));
  buffers.check(after, s, "eager step after the graph replays");
}

// ---- High throughput ----------------------------------------------------------------------------

// Both sizings, created without routing, then three routings by update: CAPACITY keeps
// R * T rows; EXACT reports 0 rows before the first routing and the rows this rank
// receives after each update (the update waits for the count exchange).
TEST(RoutingLater, HighThroughputHandlesRoutedByUpdate) {
  constexpr int K = 8;
  const ht::HtShape shape = world_shape(8, 1024, 128, K);
  const uint64_t capacity = static_cast<uint64_t>(shape.max_rows());
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  const std::vector<ht::HtStep> steps = ht::make_steps(shape, ht::random_spec(K, 97000), 3, my_rank());
  for (EpcSizing sizing : {EPC_SIZING_EXACT, EPC_SIZING_CAPACITY}) {
    const bool exact = sizing == EPC_SIZING_EXACT;
    HandlePtr handle;
    ASSERT_TRUE(create_unrouted(group.get(), handle_config(sizing), s, handle));
    WantInfo want{EPC_MODE_HIGH_THROUGHPUT,
                  EPC_LAYOUT_FLAT,
                  sizing,
                  0,
                  capacity,
                  exact ? 0 : static_cast<int64_t>(capacity),
                  0,
                  0,
                  EPC_PENDING_NONE};
    expect_info(handle.get(), want, std::string("HT ") + sizing_name(sizing) + ", before any routing");
    ht::HtBuffers buffers;
    ASSERT_TRUE(buffers.allocate(shape, K));
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const ht::HtStep& step = steps[i];
      const std::string label = std::string("HT ") + sizing_name(sizing) + " routed later, step " + std::to_string(i);
      ASSERT_TRUE(buffers.upload(step, ht::CallOptions{}, s));
      ASSERT_TRUE(ht::update_handle(handle.get(), buffers, s));
      want.rows = exact ? step.num_recv() : static_cast<int64_t>(capacity);
      want.tokens = step.tokens();
      want.topk = K;
      expect_info(handle.get(), want, label + ", after the update");
      buffers.set_handle(sizing, want.rows);
      ASSERT_TRUE(ht::dispatch_and_combine(handle.get(), buffers, s));
      buffers.check(step, s, label);
    }
  }
}

// A CAPACITY handle with global expert ids, created before the capture and first routed
// inside it: [update, dispatch (every output, host and accumulated counts), combine into
// fp16 with backward weights]; four replays with new routing, then an eager step.
TEST(RoutingLater, HighThroughputFirstRoutedInsideGraphCapture) {
  constexpr int K = 8;
  const ht::HtShape shape = world_shape(16, 2048, 256, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  ht::CallOptions options;
  options.out_dtype = EPC_DTYPE_FP16;
  options.counts_host = true;
  options.acc_counts = true;
  auto step_for = [&](int i) {
    ht::ProblemSpec spec;
    spec.topk = K;
    spec.seed = 98000 + 10 * static_cast<uint64_t>(i);
    spec.tokens = 200;                               // B fixed: part of the graph
    spec.hot_expert_share = i % 2 == 0 ? 0.0 : 0.4;  // N changes a lot between replays
    spec.hot_expert = i;
    spec.masked_fraction = 0.1;
    spec.empty_rank = 1;
    spec.fully_masked_token = true;
    return ht::make_step(ht::make_problem(shape, spec), spec.seed + 1, my_rank(), false, 0, /*global_ids=*/true);
  };
  HandlePtr handle;
  ASSERT_TRUE(
      create_unrouted(group.get(), handle_config(EPC_SIZING_CAPACITY, EPC_HANDLE_GLOBAL_EXPERT_IDS), s, handle));
  EpcHandleInfo info{};
  ASSERT_TRUE(query_handle(handle.get(), info));
  ASSERT_EQ(info.rows, shape.max_rows());
  ht::HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  buffers.set_handle(EPC_SIZING_CAPACITY, info.rows, EPC_HANDLE_GLOBAL_EXPERT_IDS);
  const ht::HtStep first = step_for(0);
  ASSERT_TRUE(buffers.upload(first, options, s));
  ASSERT_TRUE(cuda_ok(cudaStreamSynchronize(s), "uploads before the capture"));
  GraphExecPtr exec;
  ASSERT_TRUE(capture_on_every_rank(
      s,
      [&] {
        ::testing::AssertionResult r = ht::update_handle(handle.get(), buffers, s);
        if (r) r = ht::dispatch_and_combine(handle.get(), buffers, s);
        return r;
      },
      exec));
  ASSERT_TRUE(cuda_ok(cudaGraphLaunch(exec.get(), s), "cudaGraphLaunch"));
  buffers.check(first, s, "graph replay 0 (the handle's first routing)");
  for (int i = 1; i <= 3; ++i) {
    const ht::HtStep step = step_for(i);
    ASSERT_TRUE(buffers.upload(step, options, s));
    ASSERT_TRUE(cuda_ok(cudaGraphLaunch(exec.get(), s), "cudaGraphLaunch"));
    buffers.check(step, s, "graph replay " + std::to_string(i) + " (N=" + std::to_string(step.num_recv()) + ")");
  }
  const ht::HtStep after = step_for(4);
  ASSERT_TRUE(buffers.upload(after, options, s));
  ASSERT_TRUE(ht::update_handle(handle.get(), buffers, s));
  ASSERT_TRUE(ht::dispatch_and_combine(handle.get(), buffers, s));
  buffers.check(after, s, "eager step after the graph replays");
}

}  // namespace
}  // namespace epc::gputest
