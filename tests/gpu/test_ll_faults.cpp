// SPDX-License-Identifier: Apache-2.0
// Never hang, low-latency mode: when a rank does not take part in a step, every other rank's
// receive gives up after the group's timeout, and the group says which phase stalled and which
// rank it waited for (tests/gpu/absent_rank.hpp: epc_group_async_error and the next calls);
// nor when ranks disagree on how a step moves.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/gpu/absent_rank.hpp"
#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest::ll {
namespace {

// A group of `shape` whose waits give up after 1 s, buffers holding `problem`'s step for this
// rank (expert outputs of seed 7), and a handle routed by it.
struct FaultCase {
  GroupPtr group;
  Stream stream;
  LlBuffers buffers;
  LlStep step;
  HandlePtr handle;

  void set_up(const LlShape& shape, ref::Problem problem) {
    ASSERT_TRUE(create_group_with_timeout(shape, EPC_MODE_LOW_LATENCY, 1000, group));
    ASSERT_TRUE(stream.status());
    ASSERT_TRUE(buffers.allocate(shape, problem.topk));
    step = make_step(std::move(problem), 7, context().env.rank);
    ASSERT_TRUE(buffers.upload(step, stream.get()));
    ASSERT_TRUE(create_handle(group.get(), buffers, stream.get(), handle));
  }
};

TEST(LowLatencyFaults, AbsentRankMakesEveryPeerTimeOutNamingIt) {
  const int world = context().env.world_size;
  if (world < 2) GTEST_SKIP() << "needs a peer";
  const LlShape shape = world_shape(8, 1024, 16, 4);
  FaultCase c;
  ASSERT_NO_FATAL_FAILURE(c.set_up(shape, random_problem(shape, 4, 42, false, 0.0)));
  const cudaStream_t s = c.stream.get();

  AbsentRankStep absent_step;
  absent_step.queue = [&] { return dispatch(c.handle.get(), c.buffers, 0, s); };
  absent_step.next = [&] { return call_combine(c.handle.get(), c.buffers, 0, s); };
  absent_step.again = [&] { return call_dispatch(c.handle.get(), c.buffers, 0, s); };
  absent_step.phase = "low-latency dispatch receive";
  expect_absent_rank_times_out(c.group.get(), s, world - 1, absent_step);
}

// Ranks that pass different EpcDispatchArgs.max_step_tokens disagree on how the step moves
// (line records or records behind a released signal, kernels/ll/ll_dispatch_lines.cuh): each
// waits for a signal the other never sends, so every rank times out in the dispatch receive
// rather than reading what nobody wrote, and says which way its peer's signal moved the step
// (the epoch of the other kind). T 32 of 2160-byte messages: steps of up to 16 tokens
// move as line records when bounded so; rank 0 says 4, the others nothing (T).
TEST(LowLatencyFaults, RanksGivenDifferentStepBoundsTimeOut) {
  const int world = context().env.world_size;
  if (world < 2) GTEST_SKIP() << "needs a peer";
  const LlShape shape = world_shape(8, 1024, 32, 4);
  const LlShape small = world_shape(8, 1024, 4, 4);
  ref::Problem problem = random_problem(small, 4, 43, false, 0.0);
  problem.max_tokens = shape.max_tokens;
  FaultCase c;
  ASSERT_NO_FATAL_FAILURE(c.set_up(shape, std::move(problem)));
  c.buffers.bound_steps(context().env.rank == 0);
  const cudaStream_t s = c.stream.get();
  EXPECT_TRUE(dispatch(c.handle.get(), c.buffers, 0, s));
  const AsyncError polled = poll_async_error(c.group.get(), 5.0);
  EXPECT_EQ(polled.status, EPC_ERR_TIMEOUT) << polled.message;
  EXPECT_NE(polled.message.find("low-latency dispatch receive"), std::string::npos) << polled.message;
  // Each rank names the other kind: rank 0 waits for records' signals, the others for its line
  // step's signal.
  const std::string other = context().env.rank == 0 ? "moved this step as records" : "moved this step as line records";
  EXPECT_NE(polled.message.find(other), std::string::npos) << polled.message;
  EXPECT_NE(polled.message.find("were given different EpcDispatchArgs.max_step_tokens"), std::string::npos)
      << polled.message;
  EXPECT_TRUE(cuda_ok(cudaStreamSynchronize(s), "waiting for the step"));
  EXPECT_EQ(call_combine(c.handle.get(), c.buffers, 0, s), EPC_ERR_TIMEOUT);
  std::printf("rank %d: %s\n", context().env.rank, polled.message.c_str());
  EXPECT_TRUE(all_ranks_true(true));
}

}  // namespace
}  // namespace epc::gputest::ll
