// SPDX-License-Identifier: Apache-2.0
// Never hang, high-throughput mode: when a rank does not take part in a dispatch, every other
// rank's dispatch gives up after the group's timeout, and the group says which phase stalled
// and which rank it waited for (tests/gpu/absent_rank.hpp: epc_group_async_error and the next
// calls).
#include <gtest/gtest.h>

#include <vector>

#include "tests/gpu/absent_rank.hpp"
#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/harness/scoped_env.hpp"

namespace epc::gputest::ht {
namespace {

// The absent rank's dispatch, as every present rank sees it, on `group` (shape, top-K).
void expect_absent_dispatch_times_out(EpcGroup* group, const HtShape& shape, int K) {
  const int world = context().env.world_size;
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
  ASSERT_TRUE(create_handle(group, buffers, EPC_SIZING_EXACT, s, handle));

  AbsentRankStep absent_step;
  absent_step.queue = [&] { return dispatch(handle.get(), buffers, s); };
  absent_step.next = [&] { return call_combine(handle.get(), buffers, s); };
  absent_step.again = [&] { return call_dispatch(handle.get(), buffers, s); };
  absent_step.phase = "high-throughput dispatch";
  expect_absent_rank_times_out(group, s, world - 1, absent_step);
}

TEST(HighThroughputFaults, AbsentRankMakesEveryPeerTimeOutNamingIt) {
  if (context().env.world_size < 2) GTEST_SKIP() << "needs a peer";
  constexpr int K = 4;
  const HtShape shape = world_shape(8, 1024, 64, K);
  GroupPtr group;
  ASSERT_TRUE(create_group_with_timeout(shape, EPC_MODE_HIGH_THROUGHPUT, 1000, group));
  expect_absent_dispatch_times_out(group.get(), shape, K);
}

// The same across virtual nodes with steps in parts (parts of 24 tokens on T = 64): the first
// part gives up naming the absent rank, and the parts queued after it end at once on the
// failed group (expect_absent_rank_times_out bounds the whole call by 5 s).
TEST(HighThroughputFaults, AbsentRankAcrossNodesInPartsTimesOutNamingIt) {
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  constexpr int K = 4;
  const HtShape shape = world_shape(8, 1024, 64, K);
  GroupPtr group;
  {
    const test::ScopedEnv parts("EPCOMM_HT_PART_TOKENS", "24");
    ASSERT_TRUE(
        create_group_with_timeout(shape, EPC_MODE_HIGH_THROUGHPUT, 1000, group, static_cast<uint32_t>(sizes.back())));
  }
  expect_absent_dispatch_times_out(group.get(), shape, K);
}

}  // namespace
}  // namespace epc::gputest::ht
