// Never hang, high-throughput mode: when a rank does not take part in a dispatch, every other
// rank's dispatch gives up after the group's timeout, and the next call on the group says
// which phase stalled and which rank it waited for (the high-throughput twin of
// test_ll_faults.cpp, epc_group_async_error included).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest::ht {
namespace {

TEST(HighThroughputFaults, AbsentRankMakesEveryPeerTimeOutNamingIt) {
  const int world = context().env.world_size;
  const int rank = context().env.rank;
  if (world < 2) GTEST_SKIP() << "needs a peer";
  const int absent = world - 1;
  constexpr int K = 4;
  const HtShape shape = world_shape(8, 1024, 64, K);
  EpcGroupConfig config = group_config(shape, EPC_MODE_HIGH_THROUGHPUT);
  config.timeout_ms = 1000;
  EpcGroup* raw_group = nullptr;
  ASSERT_TRUE(epc_ok(epc_group_create(context().comm, &config, &raw_group), "epc_group_create"));
  GroupPtr group(raw_group);

  Stream stream;
  ASSERT_TRUE(stream.status());
  HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  // Every rank, the absent one included, has T tokens: a receiver waits for every chunk of
  // every source that has tokens (and for no source without), so each present rank must
  // wait for the absent one.
  ProblemSpec spec;
  spec.topk = K;
  spec.seed = 42;
  const HtStep step = make_step(make_problem(shape, spec), 43, rank);
  const CallOptions options;
  ASSERT_TRUE(buffers.upload(step, options, stream.get()));
  // EXACT sizing: creation waits on the host for the count exchange, which every rank joins,
  // so the layout is complete everywhere before the absent rank stays away.
  HandlePtr handle;
  ASSERT_TRUE(create_handle(group.get(), buffers, EPC_HT_SIZING_EXACT, stream.get(), handle));

  // A healthy group has no asynchronous error (a local call: no rank waits for another).
  EXPECT_TRUE(epc_ok(epc_group_async_error(group.get()), "epc_group_async_error, healthy group"));

  if (rank != absent) {
    const auto start = std::chrono::steady_clock::now();
    // Queuing succeeds; the receiving part waits on the device for the absent rank's chunks
    // and gives up.
    ASSERT_TRUE(dispatch(handle.get(), buffers, stream.get()));
    // The query does not wait for the pending dispatch (1 s): it returns at once, with
    // EPC_OK, or with the timeout only on a host slow enough to have missed the second.
    const auto query_start = std::chrono::steady_clock::now();
    const AsyncError early = async_error(group.get());
    const double query_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - query_start).count();
    EXPECT_LT(query_seconds, 0.5);
    EXPECT_TRUE(early.status == EPC_OK || early.status == EPC_ERR_TIMEOUT)
        << early.status << ": " << early.message;
    // The failure of the queued dispatch shows up without synchronising the stream.
    const AsyncError polled = poll_async_error(group.get(), 5.0);
    EXPECT_EQ(polled.status, EPC_ERR_TIMEOUT) << polled.message;
    ASSERT_TRUE(cuda_ok(cudaStreamSynchronize(stream.get()), "waiting for the dispatch"));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(seconds, 0.9);
    EXPECT_LT(seconds, 5.0);

    // After the dispatch gave up: the query and the next call say the same, word for word.
    const AsyncError queried = async_error(group.get());
    EXPECT_EQ(queried.status, EPC_ERR_TIMEOUT) << queried.message;
    EXPECT_EQ(queried.message, polled.message);
    const EpcTensor combine_x = buffers.combine_x();
    const EpcTensor out = buffers.out();
    EXPECT_EQ(epc_ht_combine(handle.get(), &combine_x, nullptr, &out, nullptr, 0, stream.get()),
              EPC_ERR_TIMEOUT);
    const std::string message = last_error();
    EXPECT_EQ(queried.message, message);
    EXPECT_NE(message.find("high-throughput dispatch"), std::string::npos) << message;
    EXPECT_NE(message.find("for rank " + std::to_string(absent)), std::string::npos) << message;
    std::printf("rank %d gave up after %.2f s: %s\n", rank, seconds, message.c_str());
    // Sticky until the group is destroyed.
    const EpcTensor x = buffers.x();
    const EpcTensor out_x = buffers.out_x();
    EXPECT_EQ(epc_ht_dispatch(handle.get(), &x, nullptr, nullptr, &out_x, nullptr, nullptr,
                              nullptr, nullptr, nullptr, 0, stream.get()),
              EPC_ERR_TIMEOUT);
    EXPECT_NE(last_error().find("high-throughput dispatch"), std::string::npos) << last_error();
    const AsyncError later = async_error(group.get());
    EXPECT_EQ(later.status, EPC_ERR_TIMEOUT);
    EXPECT_EQ(later.message, message);
  } else {
    // The absent rank ran nothing that waits: its own group recorded no failure.
    EXPECT_TRUE(epc_ok(epc_group_async_error(group.get()), "epc_group_async_error, absent rank"));
  }
  // Nobody releases its window while a peer's kernel could still write into it.
  EXPECT_TRUE(all_ranks_true(true));
}

}  // namespace
}  // namespace epc::gputest::ht
