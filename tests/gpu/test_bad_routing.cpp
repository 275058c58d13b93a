// SPDX-License-Identifier: Apache-2.0
// Expert ids outside [-1, num_experts) on the GPU. Routing enters a handle only through the
// routing copy kernel (kernels/common/routing_copy.cu), which masks such an id (-1) and records
// EPC_ERR_INVALID_ARGUMENT (phase "routing check") in the group's error record; the host turns
// the record into a status at the next call on the group (Group::check_healthy), and every
// call fails with it until the group is destroyed. What a caller sees, and when:
//   - epc_handle_create / epc_handle_update with routing on LL groups, and on HT groups with
//     CAPACITY sizing, return EPC_OK: the check runs on the device, later;
//   - the first call on the group after the copy has run returns EPC_ERR_INVALID_ARGUMENT;
//   - epc_handle_create on an HT group with EXACT sizing waits for the layout, so it returns
//     the error;
//   - epc_group_async_error returns EPC_OK while the check has not run (a held stream) and,
//     once it has (the stream synchronised), the error with the message the next call gives.
// Calls queued while the check has not run yet (the stream held by a host function until
// they are queued) are accepted; their kernels must end without a fault, since masked ids
// never become addresses and waits stop early on a failed group. A new group on the same
// communicator then runs a step that matches the reference. Every rank has bad ids, so every
// rank's group fails and no rank waits for a peer that has stopped.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest {
namespace {

constexpr int K = 4;

struct Case {
  const char* name;
  EpcMode mode;
  EpcSizing sizing;  // high-throughput only
  EpcDtype idx_dtype;
  bool queued_first;  // the step is queued behind a held stream, before the check runs
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// This rank's routing with bad ids in five entries (the same entries on every rank): past the
// end, far past it, a negative id other than -1, and the extremes of the routing's dtype.
std::vector<int64_t> with_bad_ids(std::vector<int64_t> idx, int num_experts, EpcDtype dtype) {
  const bool wide = dtype == EPC_DTYPE_INT64;
  const std::vector<int64_t> bad = {num_experts, num_experts + 1000, -2,
                                    wide ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int32_t>::min(),
                                    wide ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int32_t>::max()};
  for (std::size_t i = 0; i < bad.size(); ++i) idx[(3 + 37 * i) % idx.size()] = bad[i];
  return idx;
}

// Bad routing [B, K] in device memory of its own.
struct BadIds {
  DeviceMemory memory;
  std::vector<int32_t> staging;
  EpcTensor tensor{};

  ::testing::AssertionResult upload(const std::vector<int64_t>& idx, int tokens, EpcDtype dtype, cudaStream_t stream) {
    const std::size_t bytes = idx.size() * (dtype == EPC_DTYPE_INT64 ? 8 : 4);
    ::testing::AssertionResult r = memory.allocate(bytes, "bad topk_idx");
    if (r) r = upload_routing(memory.get(), idx, dtype, staging, stream);
    if (r) r = cuda_ok(cudaStreamSynchronize(stream), "uploading the bad routing");
    tensor = make_tensor(memory.get(), dtype, {tokens, K});
    return r;
  }
};

// Holds a stream in a host function until the test has queued its calls, so that none of
// their kernels (the routing check first) has run when they are queued. The host function
// gives up after 10 s, so that a CUDA call that waits for the device meanwhile cannot hang.
std::atomic<bool> g_hold_released{true};

void wait_for_release(void*) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!g_hold_released.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Releases the stream when it goes out of scope (or earlier, with release()).
class StreamHold {
 public:
  ::testing::AssertionResult hold(cudaStream_t stream) {
    g_hold_released.store(false);
    return cuda_ok(cudaLaunchHostFunc(stream, wait_for_release, nullptr), "cudaLaunchHostFunc (holding the stream)");
  }
  void release() { g_hold_released.store(true); }
  ~StreamHold() { release(); }
};

// `status`, the result of `call`, is the group's routing error: EPC_ERR_INVALID_ARGUMENT with
// a message naming the check, the valid range and this rank. Returns the message.
std::string expect_routing_error(EpcStatus status, const std::string& call, int num_experts) {
  const std::string message = last_error();
  EXPECT_EQ(status, EPC_ERR_INVALID_ARGUMENT) << call << ": " << message;
  EXPECT_NE(message.find("routing check"), std::string::npos) << call << ": " << message;
  EXPECT_NE(message.find("outside [-1, " + std::to_string(num_experts) + ")"), std::string::npos)
      << call << ": " << message;
  EXPECT_NE(message.find("rank " + std::to_string(my_rank()) + " "), std::string::npos) << call << ": " << message;
  return message;
}

// epc_group_async_error on `group` after the routing check has run: the routing error,
// word for word as `message`, the next call's.
void expect_async_routing_error(const EpcGroup* group, const std::string& message, int num_experts) {
  const EpcStatus status = epc_group_async_error(group);
  EXPECT_EQ(expect_routing_error(status, "epc_group_async_error", num_experts), message);
}

// ---- The group that gets bad routing ------------------------------------------------------

void bad_low_latency_step(EpcGroup* group, const Shape& shape, const Case& c, cudaStream_t stream) {
  const int E = shape.num_experts;
  ll::LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K, c.idx_dtype));
  const ll::LlStep step = ll::make_step(ll::random_problem(shape, K, 61000, false, 0.0), 61001, my_rank());
  ASSERT_TRUE(buffers.upload(step, stream));  // x, weights, y and a good routing
  BadIds bad;
  ASSERT_TRUE(bad.upload(with_bad_ids(step.mine().topk_idx, E, c.idx_dtype), step.tokens(), c.idx_dtype, stream));
  const EpcTensor good_idx = buffers.topk_idx();
  EXPECT_TRUE(epc_ok(epc_group_async_error(group), "epc_group_async_error before the bad ids"));
  StreamHold hold;
  if (c.queued_first) {
    ASSERT_TRUE(hold.hold(stream));
  }
  HandlePtr handle;
  EXPECT_TRUE(create_handle_with(group, handle_config(), &bad.tensor, stream, handle,
                                 "epc_handle_create with bad ids (checked later, on the device)"));
  ASSERT_TRUE(handle != nullptr);
  auto dispatch = [&] { return ll::call_dispatch(handle.get(), buffers, 0, stream); };
  auto combine = [&] { return ll::call_combine(handle.get(), buffers, 0, stream); };
  if (c.queued_first) {
    // The stream is still held: nothing on the host can know yet, so both are queued.
    EXPECT_TRUE(epc_ok(dispatch(), "epc_dispatch queued before the check ran"));
    EXPECT_TRUE(epc_ok(combine(), "epc_combine queued before the check ran"));
    // Nor can the query: the check has not run. It does not wait for the stream either.
    EXPECT_TRUE(epc_ok(epc_group_async_error(group), "epc_group_async_error, stream held"));
  }
  hold.release();
  // Every kernel ends and none faults (a fault would be a sticky CUDA error here).
  EXPECT_TRUE(cuda_ok(cudaStreamSynchronize(stream), "waiting for the bad routing's kernels"));
  // The check has run: the query reports it, and the next call fails with the same message.
  const std::string queried = expect_routing_error(epc_group_async_error(group), "epc_group_async_error", E);
  const std::string message = expect_routing_error(dispatch(), "epc_dispatch", E);
  EXPECT_EQ(queried, message);
  std::printf("rank %d, %s: %s\n", my_rank(), c.name, message.c_str());
  // Sticky: every later call on the group fails the same way, whatever its arguments.
  expect_routing_error(combine(), "epc_combine", E);
  expect_routing_error(update_routing(handle.get(), good_idx, stream), "epc_handle_update with good routing", E);
  EpcRouting good = EPC_ROUTING_INIT;
  good.topk_idx = &good_idx;
  EpcHandle* other = nullptr;
  expect_routing_error(epc_handle_create(group, nullptr, &good, stream, &other), "epc_handle_create with good routing",
                       E);
  EXPECT_EQ(other, nullptr);
  expect_routing_error(epc_group_barrier(group, stream), "epc_group_barrier", E);
  expect_async_routing_error(group, message, E);
}

void bad_high_throughput_step(EpcGroup* group, const Shape& shape, const Case& c, cudaStream_t stream) {
  const int E = shape.num_experts;
  ht::HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K, c.idx_dtype));
  ht::ProblemSpec spec;
  spec.topk = K;
  spec.seed = 62000;
  const ht::HtStep step = ht::make_step(ht::make_problem(shape, spec), 62001, my_rank());
  ASSERT_TRUE(buffers.upload(step, ht::CallOptions{}, stream));
  buffers.set_handle(EPC_SIZING_CAPACITY, shape.max_rows());  // the calls' [rows, ...] tensors
  BadIds bad;
  ASSERT_TRUE(bad.upload(with_bad_ids(step.mine().topk_idx, E, c.idx_dtype), step.tokens(), c.idx_dtype, stream));
  const EpcTensor good_idx = buffers.topk_idx();
  EXPECT_TRUE(epc_ok(epc_group_async_error(group), "epc_group_async_error before the bad ids"));
  StreamHold hold;
  if (c.queued_first) {
    ASSERT_TRUE(hold.hold(stream));
  }
  EpcHandle* raw = nullptr;
  const EpcHandleConfig config = handle_config(c.sizing);
  EpcRouting routing = EPC_ROUTING_INIT;
  routing.topk_idx = &bad.tensor;
  const EpcStatus created = epc_handle_create(group, &config, &routing, stream, &raw);
  HandlePtr handle(raw);
  std::string message;
  if (c.sizing == EPC_SIZING_EXACT) {
    // Creation waits on the host for the layout, which runs after the check: it is the first
    // call to see the error, and writes no out-parameter.
    message = expect_routing_error(created, "epc_handle_create (HT, EXACT) with bad ids", E);
    EXPECT_EQ(raw, nullptr);
    EXPECT_TRUE(cuda_ok(cudaStreamSynchronize(stream), "waiting for the bad routing's kernels"));
    // The query reports what creation returned.
    expect_async_routing_error(group, message, E);
  } else {
    EXPECT_TRUE(epc_ok(created, "epc_handle_create (HT, CAPACITY) with bad ids (checked later)"));
    ASSERT_TRUE(handle != nullptr);
    EpcHandleInfo info{};
    EXPECT_TRUE(query_handle(handle.get(), info));
    EXPECT_EQ(info.rows, shape.max_rows());
    if (c.queued_first) {
      // Queued behind the held stream, before the check (and the layout) ran.
      EXPECT_TRUE(ht::dispatch(handle.get(), buffers, stream));
      EXPECT_TRUE(ht::combine(handle.get(), buffers, stream));
      // Nor can the query: the check has not run. It does not wait for the stream either.
      EXPECT_TRUE(epc_ok(epc_group_async_error(group), "epc_group_async_error, stream held"));
    }
    hold.release();
    EXPECT_TRUE(cuda_ok(cudaStreamSynchronize(stream), "waiting for the bad routing's kernels"));
    // The check has run: the query reports it, and the next call fails with the same message.
    const std::string queried = expect_routing_error(epc_group_async_error(group), "epc_group_async_error", E);
    message = expect_routing_error(ht::call_dispatch(handle.get(), buffers, stream), "epc_dispatch", E);
    EXPECT_EQ(queried, message);
    expect_routing_error(ht::call_combine(handle.get(), buffers, stream), "epc_combine", E);
    expect_routing_error(update_routing(handle.get(), good_idx, stream), "epc_handle_update with good routing", E);
  }
  std::printf("rank %d, %s: %s\n", my_rank(), c.name, message.c_str());
  EpcRouting good = EPC_ROUTING_INIT;
  good.topk_idx = &good_idx;
  EpcHandle* other = nullptr;
  expect_routing_error(epc_handle_create(group, nullptr, &good, stream, &other), "epc_handle_create with good routing",
                       E);
  EXPECT_EQ(other, nullptr);
  expect_routing_error(epc_group_barrier(group, stream), "epc_group_barrier", E);
  expect_async_routing_error(group, message, E);
}

// ---- A new group afterwards ---------------------------------------------------------------

void good_low_latency_step(const Shape& shape, EpcDtype idx_dtype) {
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  ll::LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K, idx_dtype));
  const ll::LlStep step = ll::make_step(ll::random_problem(shape, K, 63000, true, 0.1), 63001, my_rank());
  ASSERT_TRUE(buffers.upload(step, stream.get()));
  HandlePtr handle;
  ASSERT_TRUE(ll::create_handle(group.get(), buffers, stream.get(), handle));
  ASSERT_TRUE(ll::dispatch_and_combine(handle.get(), buffers, stream.get()));
  buffers.check(step, stream.get(), "new group after bad routing");
}

void good_high_throughput_steps(const Shape& shape, EpcSizing sizing, EpcDtype idx_dtype) {
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  ht::run_steps(group.get(), shape, ht::make_steps(shape, ht::random_spec(K, 64000), 2, my_rank()), sizing,
                {ht::CallOptions{}}, "new group after bad routing", idx_dtype);
}

class BadRouting : public ::testing::TestWithParam<Case> {};

TEST_P(BadRouting, IsRefusedStickyWithoutFaultAndANewGroupWorks) {
  const Case& c = GetParam();
  const Shape shape = world_shape(8, 1024, 64, K);
  {
    GroupPtr group;
    ASSERT_TRUE(create_group(shape, c.mode, group));
    Stream stream;
    ASSERT_TRUE(stream.status());
    if (c.mode == EPC_MODE_LOW_LATENCY) {
      bad_low_latency_step(group.get(), shape, c, stream.get());
    } else {
      bad_high_throughput_step(group.get(), shape, c, stream.get());
    }
    EXPECT_TRUE(cuda_ok(cudaGetLastError(), "cudaGetLastError after the bad routing"));
    EXPECT_TRUE(cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the bad routing"));
  }  // the failed group is destroyed here, on every rank (collective)
  if (c.mode == EPC_MODE_LOW_LATENCY) {
    good_low_latency_step(shape, c.idx_dtype);
  } else {
    good_high_throughput_steps(shape, c.sizing, c.idx_dtype);
  }
}

const Case kCases[] = {
    {"LowLatencyInt64", EPC_MODE_LOW_LATENCY, EPC_SIZING_EXACT, EPC_DTYPE_INT64, false},
    {"LowLatencyInt32QueuedBehindHeldStream", EPC_MODE_LOW_LATENCY, EPC_SIZING_EXACT, EPC_DTYPE_INT32, true},
    {"HighThroughputExactInt64", EPC_MODE_HIGH_THROUGHPUT, EPC_SIZING_EXACT, EPC_DTYPE_INT64, false},
    {"HighThroughputExactInt32", EPC_MODE_HIGH_THROUGHPUT, EPC_SIZING_EXACT, EPC_DTYPE_INT32, false},
    {"HighThroughputCapacityInt64", EPC_MODE_HIGH_THROUGHPUT, EPC_SIZING_CAPACITY, EPC_DTYPE_INT64, false},
    {"HighThroughputCapacityInt32QueuedBehindHeldStream", EPC_MODE_HIGH_THROUGHPUT, EPC_SIZING_CAPACITY,
     EPC_DTYPE_INT32, true},
};

INSTANTIATE_TEST_SUITE_P(Cases, BadRouting, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace epc::gputest
