// SPDX-License-Identifier: Apache-2.0
#include "tests/gpu/absent_rank.hpp"

#include <chrono>
#include <cstdio>

#include "tests/gpu/rank_context.hpp"

namespace epc::gputest {

::testing::AssertionResult create_group_with_timeout(const Shape& shape, EpcMode mode, uint32_t timeout_ms,
                                                     GroupPtr& out, uint32_t virtual_node_size) {
  EpcGroupConfig config = group_config(shape, mode);
  config.timeout_ms = timeout_ms;
  config.virtual_node_size = virtual_node_size;
  EpcGroup* raw = nullptr;
  ::testing::AssertionResult created = epc_ok(epc_group_create(context().comm, &config, &raw), "epc_group_create");
  if (created) out.reset(raw);
  return created;
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void expect_absent_rank_times_out(EpcGroup* group, cudaStream_t stream, int absent, const AbsentRankStep& step) {
  const int rank = context().env.rank;
  // A healthy group has no asynchronous error (a local call: no rank waits for another).
  EXPECT_TRUE(epc_ok(epc_group_async_error(group), "epc_group_async_error, healthy group"));
  if (rank == absent) {
    // The absent rank ran nothing that waits: its own group recorded no failure.
    EXPECT_TRUE(epc_ok(epc_group_async_error(group), "epc_group_async_error, absent rank"));
    EXPECT_TRUE(all_ranks_true(true));
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  // Queuing succeeds; the kernel waits on the device for the absent rank and gives up.
  EXPECT_TRUE(step.queue());
  // The query does not wait for the pending step (1 s): it returns at once, with EPC_OK, or
  // with the timeout only on a host slow enough to have missed the second.
  const auto query_start = std::chrono::steady_clock::now();
  const AsyncError early = async_error(group);
  EXPECT_LT(seconds_since(query_start), 0.5);
  EXPECT_TRUE(early.status == EPC_OK || early.status == EPC_ERR_TIMEOUT) << early.status << ": " << early.message;
  // The failure of the queued step shows up without synchronising the stream.
  const AsyncError polled = poll_async_error(group, 5.0);
  EXPECT_EQ(polled.status, EPC_ERR_TIMEOUT) << polled.message;
  EXPECT_TRUE(cuda_ok(cudaStreamSynchronize(stream), "waiting for the step"));
  const double seconds = seconds_since(start);
  EXPECT_GE(seconds, 0.9);
  EXPECT_LT(seconds, 5.0);

  // After the step gave up: the query and the next call say the same, word for word.
  const AsyncError queried = async_error(group);
  EXPECT_EQ(queried.status, EPC_ERR_TIMEOUT) << queried.message;
  EXPECT_EQ(queried.message, polled.message);
  EXPECT_EQ(step.next(), EPC_ERR_TIMEOUT);
  const std::string message = last_error();
  EXPECT_EQ(queried.message, message);
  EXPECT_NE(message.find(step.phase), std::string::npos) << message;
  EXPECT_NE(message.find("for rank " + std::to_string(absent)), std::string::npos) << message;
  std::printf("rank %d gave up after %.2f s: %s\n", rank, seconds, message.c_str());
  // Sticky until the group is destroyed.
  EXPECT_EQ(step.again(), EPC_ERR_TIMEOUT);
  EXPECT_NE(last_error().find(step.phase), std::string::npos) << last_error();
  const AsyncError later = async_error(group);
  EXPECT_EQ(later.status, EPC_ERR_TIMEOUT);
  EXPECT_EQ(later.message, message);
  EXPECT_TRUE(all_ranks_true(true));
}

}  // namespace epc::gputest
