// Never hang: when a rank does not take part in a low-latency step, every other rank's
// receive gives up after the group's timeout, and the next call on the group says which
// phase stalled and which rank it waited for. epc_group_async_error reports the same failure
// without a call that does work: at once (it never waits), as soon as the receive kernel has
// recorded it (no stream synchronisation needed), word for word as the next call does.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest::ll {
namespace {

TEST(LowLatencyFaults, AbsentRankMakesEveryPeerTimeOutNamingIt) {
  const int world = context().env.world_size;
  const int rank = context().env.rank;
  if (world < 2) GTEST_SKIP() << "needs a peer";
  const int absent = world - 1;
  const LlShape shape = world_shape(8, 1024, 16, 4);
  EpcGroupConfig config = group_config(shape, EPC_MODE_LOW_LATENCY);
  config.timeout_ms = 1000;
  EpcGroup* raw_group = nullptr;
  ASSERT_TRUE(epc_ok(epc_group_create(context().comm, &config, &raw_group), "epc_group_create"));
  GroupPtr group(raw_group);

  Stream stream;
  ASSERT_TRUE(stream.status());
  LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, 4));
  const LlStep step = make_step(random_problem(shape, 4, 42, false, 0.0), 7, rank);
  ASSERT_TRUE(buffers.upload(step, stream.get()));
  HandlePtr handle;
  ASSERT_TRUE(create_handle(group.get(), buffers, stream.get(), handle));

  // A healthy group has no asynchronous error (a local call: no rank waits for another).
  EXPECT_TRUE(epc_ok(epc_group_async_error(group.get()), "epc_group_async_error, healthy group"));

  if (rank != absent) {
    const auto start = std::chrono::steady_clock::now();
    // Queuing succeeds; the receive half waits on the device and gives up.
    ASSERT_TRUE(dispatch(handle.get(), buffers, 0, stream.get()));
    // The query does not wait for the pending receive (1 s): it returns at once, with
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
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(seconds, 0.9);
    EXPECT_LT(seconds, 5.0);

    // After the step gave up: the query and the next call say the same, word for word.
    const AsyncError queried = async_error(group.get());
    EXPECT_EQ(queried.status, EPC_ERR_TIMEOUT) << queried.message;
    EXPECT_EQ(queried.message, polled.message);
    const EpcTensor expert_out = buffers.expert_out();
    const EpcTensor out = buffers.out();
    EXPECT_EQ(epc_ll_combine(handle.get(), &expert_out, &out, 0, stream.get()), EPC_ERR_TIMEOUT);
    std::string message = last_error();
    EXPECT_EQ(queried.message, message);
    EXPECT_NE(message.find("low-latency dispatch receive"), std::string::npos) << message;
    EXPECT_NE(message.find("for rank " + std::to_string(absent)), std::string::npos) << message;
    std::printf("rank %d gave up after %.2f s: %s\n", rank, seconds, message.c_str());
    // Sticky until the group is destroyed.
    const EpcTensor x = buffers.x(), weights = buffers.topk_weights(), out_x = buffers.out_x(),
                    counts = buffers.out_counts();
    EXPECT_EQ(epc_ll_dispatch(handle.get(), &x, &weights, &out_x, &counts, 0, stream.get()),
              EPC_ERR_TIMEOUT);
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
}  // namespace epc::gputest::ll
