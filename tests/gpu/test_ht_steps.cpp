// SPDX-License-Identifier: Apache-2.0
// High-throughput steps without a host synchronisation per step: captured in a CUDA graph and
// replayed with new routing, and 500 steps back to back. Compared bit for bit with the CPU
// reference model, as in test_ht.cpp (see ht_case.hpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/reference/reference.hpp"

namespace epc::gputest::ht {
namespace {

// ---- 1. CUDA graph ----------------------------------------------------------------------------

// Both graph tests: E = 16R, H = 2048, T = 256, K = 8, a stream and one set of buffers.
class HighThroughputGraph : public ::testing::Test {
 protected:
  static constexpr int K = 8;
  void SetUp() override {
    ASSERT_TRUE(create_group(shape_, EPC_MODE_HIGH_THROUGHPUT, group_));
    ASSERT_TRUE(stream_.status());
    ASSERT_TRUE(buffers_.allocate(shape_, K));
  }
  // Uploads `step`, replays `exec` and compares.
  void replay_and_check(cudaGraphExec_t exec, const HtStep& step, const std::string& label) {
    ASSERT_TRUE(buffers_.upload(step, options_, stream_.get()));
    ASSERT_TRUE(cuda_ok(cudaGraphLaunch(exec, stream_.get()), "cudaGraphLaunch"));
    buffers_.check(step, stream_.get(), label + " (N=" + std::to_string(step.num_recv()) + ")");
  }

  const HtShape shape_ = world_shape(16, 2048, 256, K);
  const CallOptions options_;  // every optional tensor, combine with backward weights
  GroupPtr group_;
  Stream stream_;
  HtBuffers buffers_;
  HandlePtr handle_;
};

// CAPACITY sizing: one eager step (create, dispatch, combine); then a capture (global mode) of
// [epc_handle_update from the fixed routing buffer, epc_dispatch, epc_combine with
// backward weights] on fixed buffers; four replays, each after writing NEW routing, x, weights
// and combine rows into those buffers (B per rank fixed: the shapes are part of the graph;
// rank 1 has none; N changes with the routing, and combine rows past N are NaN garbage);
// then one more eager step on the same handle.
TEST_F(HighThroughputGraph, CapacityHandleReplaysWithNewRouting) {
  auto step_for = [&](int s) {
    ProblemSpec spec;
    spec.topk = K;
    spec.seed = 30000 + 10 * static_cast<uint64_t>(s);
    spec.tokens = 200;
    spec.hot_expert_share = s % 2 == 0 ? 0.0 : 0.4;  // N changes a lot between replays
    spec.hot_expert = s;
    spec.masked_fraction = 0.1;
    spec.empty_rank = 1;
    spec.fully_masked_token = true;
    return make_step(make_problem(shape_, spec), spec.seed + 1, my_rank());
  };
  const cudaStream_t stream = stream_.get();
  {
    const HtStep warmup = step_for(0);
    ASSERT_TRUE(buffers_.upload(warmup, options_, stream));
    ASSERT_TRUE(create_handle(group_.get(), buffers_, EPC_SIZING_CAPACITY, stream, handle_));
    ASSERT_TRUE(dispatch_and_combine(handle_.get(), buffers_, stream));
    buffers_.check(warmup, stream, "eager warm-up before capture");
  }
  GraphExecPtr exec;
  ASSERT_TRUE(capture_on_every_rank(
      stream,
      [&] {
        ::testing::AssertionResult r = update_handle(handle_.get(), buffers_, stream);
        if (r) r = dispatch_and_combine(handle_.get(), buffers_, stream);
        return r;
      },
      exec));
  for (int s = 1; s <= 4; ++s) {
    replay_and_check(exec.get(), step_for(s), "graph replay " + std::to_string(s));
  }
  const HtStep after = step_for(5);
  ASSERT_TRUE(buffers_.upload(after, options_, stream));
  ASSERT_TRUE(update_handle(handle_.get(), buffers_, stream));
  ASSERT_TRUE(dispatch_and_combine(handle_.get(), buffers_, stream));
  buffers_.check(after, stream, "eager step after the graph replays");
}

// An EXACT handle's dispatch and combine (no update: its layout is fixed) captured once and
// replayed three times with new x and new combine rows on the same routing.
TEST_F(HighThroughputGraph, ExactHandleReplaysWithNewPayloads) {
  const cudaStream_t stream = stream_.get();
  ref::Problem p = make_problem(shape_, random_spec(K, 31000));
  const HtStep first = make_step(p, 31001, my_rank());
  ASSERT_TRUE(buffers_.upload(first, options_, stream));
  ASSERT_TRUE(create_handle(group_.get(), buffers_, EPC_SIZING_EXACT, stream, handle_));
  GraphExecPtr exec;
  ASSERT_TRUE(
      capture_on_every_rank(stream, [&] { return dispatch_and_combine(handle_.get(), buffers_, stream); }, exec));
  for (int s = 0; s < 3; ++s) {
    replace_payload(p, 31100 + static_cast<uint64_t>(s));
    replay_and_check(exec.get(), make_step(p, 31200 + s, my_rank()), "EXACT graph replay " + std::to_string(s));
  }
}

// ---- 2. Back to back --------------------------------------------------------------------------

// 500 steps on one CAPACITY handle, updated with new routing every step, cycling through 7
// problems whose inputs were uploaded beforehand into their own buffers (new B, new x, new
// routing every step; problem 3 has no tokens on any rank, problem 6 sends every token to
// expert 0). Per step only device work is queued: poison the outputs, update, dispatch,
// combine. Every 50th step and the last one are waited for and compared.
TEST(HighThroughput, FiveHundredStepsBackToBack) {
  constexpr int kSteps = 500;
  constexpr int kProblems = 7;  // coprime to kCheckEvery: the checks see every problem
  constexpr int kCheckEvery = 50;
  const int K = 8;
  const HtShape shape = world_shape(8, 1024, 128, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const CallOptions options;
  std::vector<HtStep> steps;
  std::vector<HtBuffers> buffers(kProblems);
  for (int i = 0; i < kProblems; ++i) {
    ProblemSpec spec = random_spec(K, 32000 + 10 * static_cast<uint64_t>(i));
    if (i == 6) spec.hot_expert_share = 1.0;
    ref::Problem p = make_problem(shape, spec);
    if (i == 3) {
      for (ref::RankTokens& rank : p.ranks) rank = ref::RankTokens{};
    }
    steps.push_back(make_step(std::move(p), spec.seed + 1, my_rank()));
  }
  for (int i = 0; i < kProblems; ++i) {
    ASSERT_TRUE(buffers[i].allocate(shape, K));
    ASSERT_TRUE(buffers[i].upload(steps[i], options, stream.get()));
  }
  ASSERT_TRUE(cuda_ok(cudaStreamSynchronize(stream.get()), "uploads"));

  HandlePtr handle;
  ASSERT_TRUE(create_handle(group.get(), buffers[0], EPC_SIZING_CAPACITY, stream.get(), handle));
  for (HtBuffers& b : buffers) b.set_handle(EPC_SIZING_CAPACITY, buffers[0].rows());
  int failing_checks = 0;
  int checks = 0;
  for (int s = 0; s < kSteps; ++s) {
    HtBuffers& b = buffers[s % kProblems];
    ASSERT_TRUE(b.poison_outputs(stream.get()));
    if (s > 0) {
      ASSERT_TRUE(update_handle(handle.get(), b, stream.get()));
    }
    ASSERT_TRUE(dispatch_and_combine(handle.get(), b, stream.get()));
    if ((s + 1) % kCheckEvery != 0 && s != kSteps - 1) continue;
    ++checks;
    const HtStep& step = steps[s % kProblems];
    const std::string where = "back-to-back step " + std::to_string(s) + " (problem " + std::to_string(s % kProblems) +
                              ", B=" + std::to_string(step.tokens()) + ", N=" + std::to_string(step.num_recv()) + ")";
    if (!b.check(step, stream.get(), where, failing_checks < kMaxReportedSteps)) {
      ++failing_checks;
    }
  }
  EXPECT_EQ(failing_checks, 0) << failing_checks << " of " << checks << " checked steps differ from the reference";
}

}  // namespace
}  // namespace epc::gputest::ht
