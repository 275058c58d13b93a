// SPDX-License-Identifier: Apache-2.0
// Never hang, low-latency mode: when a rank does not take part in a step, every other rank's
// receive gives up after the group's timeout, and the group says which phase stalled and which
// rank it waited for (tests/gpu/absent_rank.hpp: epc_group_async_error and the next calls).
#include <gtest/gtest.h>

#include "tests/gpu/absent_rank.hpp"
#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest::ll {
namespace {

TEST(LowLatencyFaults, AbsentRankMakesEveryPeerTimeOutNamingIt) {
  const int world = context().env.world_size;
  if (world < 2) GTEST_SKIP() << "needs a peer";
  const LlShape shape = world_shape(8, 1024, 16, 4);
  GroupPtr group;
  ASSERT_TRUE(create_group_with_timeout(shape, EPC_MODE_LOW_LATENCY, 1000, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, 4));
  const LlStep step = make_step(random_problem(shape, 4, 42, false, 0.0), 7, context().env.rank);
  ASSERT_TRUE(buffers.upload(step, s));
  HandlePtr handle;
  ASSERT_TRUE(create_handle(group.get(), buffers, s, handle));

  AbsentRankStep absent_step;
  absent_step.queue = [&] { return dispatch(handle.get(), buffers, 0, s); };
  absent_step.next = [&] { return call_combine(handle.get(), buffers, 0, s); };
  absent_step.again = [&] { return call_dispatch(handle.get(), buffers, 0, s); };
  absent_step.phase = "low-latency dispatch receive";
  expect_absent_rank_times_out(group.get(), s, world - 1, absent_step);
}

}  // namespace
}  // namespace epc::gputest::ll
