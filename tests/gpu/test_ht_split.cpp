// SPDX-License-Identifier: Apache-2.0
// High-throughput steps split by EPC_STEP_SEND_ONLY (ABI 2.1): the send-only half, then
// epc_complete on the same stream after other work, on a second stream joined by events, or
// both captured in a CUDA graph (split_step.hpp). FLAT on EXACT and CAPACITY handles, bf16
// and caller-quantized fp8 (passthrough) payloads, every optional output (the host copy of
// the counts and the accumulated counts included) and the backward weights: every output
// equals the CPU reference model bit for bit, and so does the fused call run next on the same
// buffers. EXPERT_PACKED halves are checked in test_ht_packed.cpp, the call-order rules in
// test_call_order.cpp.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/gpu/split_step.hpp"

namespace epc::gputest::ht {
namespace {

constexpr int K = 8;

// Dispatch then combine on `handle` with the buffers' tensors.
std::vector<StepCall> step_calls(EpcHandle* handle, const HtBuffers& buffers) {
  return {[handle, &buffers](uint32_t flags, cudaStream_t s) { return call_dispatch(handle, buffers, s, flags); },
          [handle, &buffers](uint32_t flags, cudaStream_t s) { return call_combine(handle, buffers, s, flags); }};
}

uint32_t pending_of(const EpcHandle* handle) {
  EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
  EXPECT_TRUE(query_handle(handle, info));
  return info.pending;
}

TEST(HighThroughputSplit, FlatMatchesTheReference) {
  const HtShape shape = world_shape(8, 2048, 256, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  SplitRunner runner;
  ASSERT_TRUE(runner.status());
  const cudaStream_t s = stream.get();
  HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  CallOptions options;  // every optional tensor, backward weights
  options.counts_host = true;
  options.acc_counts = true;
  uint64_t seed = 52000;
  int cases = 0;
  for (SplitMode mode : {SplitMode::kSameStream, SplitMode::kSecondStream, SplitMode::kGraph}) {
    for (bool fp8 : {false, true}) {
      const EpcSizing sizing = cases++ % 2 == 0 ? EPC_SIZING_EXACT : EPC_SIZING_CAPACITY;
      ProblemSpec spec = random_spec(K, seed);
      spec.fp8 = fp8;
      const HtStep step = make_step(make_problem(shape, spec), seed + 1, my_rank(), fp8);
      seed += 10;
      const std::string label = std::string(split_name(mode)) + (fp8 ? ", fp8 passthrough, " : ", bf16, ") +
                                sizing_name(sizing) + " (N=" + std::to_string(step.num_recv()) + ")";
      ASSERT_TRUE(buffers.upload(step, options, s));
      HandlePtr handle;
      ASSERT_TRUE(create_handle(group.get(), buffers, sizing, s, handle));
      ASSERT_TRUE(runner.run(mode, handle.get(), s, step_calls(handle.get(), buffers))) << label;
      EXPECT_EQ(pending_of(handle.get()), static_cast<uint32_t>(EPC_PENDING_NONE)) << label;
      buffers.check(step, s, label);
      // The fused calls on the same buffers and handle give the same bits.
      ASSERT_TRUE(buffers.upload(step, options, s));
      ASSERT_TRUE(runner.run(SplitMode::kFused, handle.get(), s, step_calls(handle.get(), buffers))) << label;
      buffers.check(step, s, label + ", then fused");
    }
  }
}

// One graph of split dispatch and combine (each receive half on a second stream inside the
// capture) on an EXACT handle, replayed three times with new payloads on the same routing:
// the step counters the halves share advance on the device at every replay.
TEST(HighThroughputSplit, GraphReplaysWithNewPayloads) {
  const HtShape shape = world_shape(16, 2048, 256, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  SplitRunner runner;
  ASSERT_TRUE(runner.status());
  const cudaStream_t s = stream.get();
  HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  const CallOptions options;
  ref::Problem p = make_problem(shape, random_spec(K, 53000));
  const HtStep first = make_step(p, 53001, my_rank());
  ASSERT_TRUE(buffers.upload(first, options, s));
  HandlePtr handle;
  ASSERT_TRUE(create_handle(group.get(), buffers, EPC_SIZING_EXACT, s, handle));
  GraphExecPtr exec;
  ASSERT_TRUE(runner.capture(handle.get(), s, step_calls(handle.get(), buffers), exec));
  EXPECT_EQ(pending_of(handle.get()), static_cast<uint32_t>(EPC_PENDING_NONE));
  for (int r = 0; r < 3; ++r) {
    replace_payload(p, 53100 + static_cast<uint64_t>(r));
    const HtStep step = make_step(p, 53200 + static_cast<uint64_t>(r), my_rank());
    ASSERT_TRUE(buffers.upload(step, options, s));
    ASSERT_TRUE(cuda_ok(cudaGraphLaunch(exec.get(), s), "cudaGraphLaunch"));
    buffers.check(step, s, "split graph replay " + std::to_string(r));
  }
  // An eager fused step after the replays.
  const HtStep after = make_step(p, 53300, my_rank());
  ASSERT_TRUE(buffers.upload(after, options, s));
  ASSERT_TRUE(dispatch_and_combine(handle.get(), buffers, s));
  buffers.check(after, s, "fused step after the split graph replays");
}

}  // namespace
}  // namespace epc::gputest::ht
