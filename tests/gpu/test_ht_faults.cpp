// SPDX-License-Identifier: Apache-2.0
// Never hang, high-throughput mode: when a rank does not take part in a dispatch, every other
// rank's dispatch gives up after the group's timeout, and the group says which phase stalled
// and which rank it waited for (tests/gpu/absent_rank.hpp: epc_group_async_error and the next
// calls).
#include <gtest/gtest.h>

#include "tests/gpu/absent_rank.hpp"
#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest::ht {
namespace {

TEST(HighThroughputFaults, AbsentRankMakesEveryPeerTimeOutNamingIt) {
  const int world = context().env.world_size;
  if (world < 2) GTEST_SKIP() << "needs a peer";
  constexpr int K = 4;
  const HtShape shape = world_shape(8, 1024, 64, K);
  GroupPtr group;
  ASSERT_TRUE(create_group_with_timeout(shape, EPC_MODE_HIGH_THROUGHPUT, 1000, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  // Every rank, the absent one included, has T tokens: a receiver waits for every chunk of
  // every source that has tokens (and for no source without), so each present rank must
  // wait for the absent one.
  ProblemSpec spec;
  spec.topk = K;
  spec.seed = 42;
  const HtStep step = make_step(make_problem(shape, spec), 43, context().env.rank);
  ASSERT_TRUE(buffers.upload(step, CallOptions{}, s));
  // EXACT sizing: creation waits on the host for the count exchange, which every rank joins,
  // so the layout is complete everywhere before the absent rank stays away.
  HandlePtr handle;
  ASSERT_TRUE(create_handle(group.get(), buffers, EPC_SIZING_EXACT, s, handle));

  AbsentRankStep absent_step;
  absent_step.queue = [&] { return dispatch(handle.get(), buffers, s); };
  absent_step.next = [&] { return call_combine(handle.get(), buffers, s); };
  absent_step.again = [&] { return call_dispatch(handle.get(), buffers, s); };
  absent_step.phase = "high-throughput dispatch";
  expect_absent_rank_times_out(group.get(), s, world - 1, absent_step);
}

}  // namespace
}  // namespace epc::gputest::ht
