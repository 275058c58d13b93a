// SPDX-License-Identifier: Apache-2.0
// Groups on communicators other than the suite's own: one in NCCL's non-blocking mode
// (ncclConfig_t.blocking = 0), whose calls that need every rank return ncclInProgress and
// finish in the background, and communicators on which one rank never creates the group:
// the others' epc_group_create ends after timeout_ms with TIMEOUT instead of waiting in NCCL
// for good, and the communicator it leaves can still be released (core/nccl_wait.hpp); and
// communicators made by epc_comm_init_config with a bound (core/bootstrap.cpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "tests/gpu/gpu_case_common.hpp"
#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest {
namespace {

// A unique id made on rank 0, known to every rank (broadcast over the suite's communicator).
::testing::AssertionResult shared_unique_id(ncclUniqueId* id) {
  if (my_rank() == 0 && ncclGetUniqueId(id) != ncclSuccess) return ::testing::AssertionFailure() << "ncclGetUniqueId";
  void* buf = nullptr;
  if (cudaMalloc(&buf, sizeof *id) != cudaSuccess) return ::testing::AssertionFailure() << "cudaMalloc";
  bool ok = cudaMemcpy(buf, id, sizeof *id, cudaMemcpyHostToDevice) == cudaSuccess &&
            ncclBroadcast(buf, buf, sizeof *id, ncclUint8, 0, static_cast<ncclComm_t>(context().comm), nullptr) ==
                ncclSuccess &&
            cudaMemcpy(id, buf, sizeof *id, cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(buf);
  return ok ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << "broadcasting the unique id";
}

// Waits (up to 60 s) until a non-blocking communicator's last call has finished (its state
// says so, whatever the call returned: core/nccl_wait.cpp says why).
::testing::AssertionResult settle(ncclComm_t comm, ncclResult_t issued, const char* what) {
  ncclResult_t state = issued == ncclSuccess ? ncclInProgress : issued;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (state == ncclInProgress) {
    if (std::chrono::steady_clock::now() > end) return ::testing::AssertionFailure() << what << ": still in progress";
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ::testing::AssertionFailure() << what;
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (state != ncclSuccess) return ::testing::AssertionFailure() << what << ": " << ncclGetErrorString(state);
  return ::testing::AssertionSuccess();
}

// A second communicator over the suite's ranks, in NCCL's non-blocking mode.
::testing::AssertionResult nonblocking_comm(ncclComm_t* comm) {
  ncclUniqueId id;
  auto shared = shared_unique_id(&id);
  if (!shared) return shared;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = ncclCommInitRankConfig(comm, context().env.world_size, id, my_rank(), &config);
  return settle(*comm, r, "ncclCommInitRankConfig (non-blocking)");
}

// Releases a non-blocking communicator every rank is done with.
void release_nonblocking(ncclComm_t comm) {
  EXPECT_TRUE(settle(comm, ncclCommFinalize(comm), "ncclCommFinalize"));
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// A host-side rendezvous of all ranks on the suite's communicator.
void all_ranks_sync() { EXPECT_TRUE(all_ranks_true(true)); }

// On `comm`: an LL group's sequence of two steps and an HT group's two steps (EXACT and
// CAPACITY handles), each against the reference.
void expect_groups_work_on(void* comm, uint64_t seed, const char* label) {
  const Shape shape = world_shape(8, 2048, 32, 8);
  EpcGroupConfig c = group_config(shape, EPC_MODE_LOW_LATENCY);
  EpcGroup* raw = nullptr;
  ASSERT_EQ(epc_group_create(comm, &c, &raw), EPC_OK) << label << ": " << last_error();
  {
    GroupPtr group(raw);
    ASSERT_EQ(epc_group_barrier(group.get(), nullptr), EPC_OK) << last_error();
    std::vector<ref::Problem> problems;
    for (uint64_t s = 0; s < 2; ++s) problems.push_back(ll::random_problem(shape, 8, seed + s, true, 0.1));
    ll::run_sequence(group.get(), shape, problems, seed + 100, label);
  }
  const Shape ht_shape = world_shape(16, 2048, 256, 8);
  EpcGroupConfig h = group_config(ht_shape, EPC_MODE_HIGH_THROUGHPUT);
  ASSERT_EQ(epc_group_create(comm, &h, &raw), EPC_OK) << label << ": " << last_error();
  GroupPtr group(raw);
  const std::vector<ht::HtStep> steps = ht::make_steps(ht_shape, ht::random_spec(8, seed + 200), 2, my_rank());
  for (EpcSizing sizing : {EPC_SIZING_EXACT, EPC_SIZING_CAPACITY}) {
    ht::run_steps(group.get(), ht_shape, steps, sizing, {ht::payload_only()}, label);
  }
}

TEST(CommModes, GroupsWorkOnANonBlockingCommunicator) {
  ncclComm_t comm = nullptr;
  ASSERT_TRUE(nonblocking_comm(&comm));
  expect_groups_work_on(comm, 2600, "non-blocking communicator");
  all_ranks_sync();
  release_nonblocking(comm);
}

// The last rank never creates the group; every other rank's epc_group_create returns
// TIMEOUT after about timeout_ms, whether the communicator is non-blocking (NCCL's call
// returns ncclInProgress and never finishes) or blocking with its connections made (the
// verdict's all-reduce kernel never ends). Each then releases its communicator: the present
// ranks with epc_comm_destroy, which aborts a communicator a timeout left stranded.
void expect_creation_times_out(void* comm, const char* kind) {
  const int absent = context().env.world_size - 1;
  EpcGroupConfig c = small_config();
  c.timeout_ms = 2000;
  if (my_rank() != absent) {
    EpcGroup* group = reinterpret_cast<EpcGroup*>(0x10);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(epc_group_create(comm, &c, &group), EPC_ERR_TIMEOUT) << kind << ": " << last_error();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string message = last_error();
    EXPECT_NE(message.find("did not finish within 2000 ms"), std::string::npos) << message;
    EXPECT_NE(message.find("ncclCommAbort"), std::string::npos) << message;
    EXPECT_EQ(group, reinterpret_cast<EpcGroup*>(0x10)) << "out-parameter written on failure";
    EXPECT_GE(seconds, 1.9);
    EXPECT_LT(seconds, 10.0);
    std::printf("%s: TIMEOUT after %.2f s: %s\n", kind, seconds, message.c_str());
    EXPECT_EQ(epc_comm_destroy(comm), EPC_OK) << last_error();
  }
  all_ranks_sync();
  // The absent rank's communicator: its peers have aborted theirs, so it is aborted too.
  if (my_rank() == absent) {
    EXPECT_EQ(ncclCommAbort(static_cast<ncclComm_t>(comm)), ncclSuccess);
  }
  all_ranks_sync();
}

// After a timed-out creation the device and the suite's communicator are unharmed: a group
// comes up on it, proves every peer reachable and goes again.
void expect_a_group_on_the_suites_communicator() {
  EpcGroupConfig c = small_config();
  EpcGroup* group = nullptr;
  ASSERT_EQ(epc_group_create(context().comm, &c, &group), EPC_OK) << last_error();
  ASSERT_EQ(epc_group_barrier(group, nullptr), EPC_OK) << last_error();
  ASSERT_EQ(epc_group_destroy(group), EPC_OK) << last_error();
}

// A non-blocking communicator of two ranks whose second rank never comes (nobody else has
// its unique id) stays in creation: epc_group_create waits for it up to timeout_ms, returns
// TIMEOUT, and epc_comm_destroy aborts it. Runs alone on every rank, so on one GPU too.
TEST(CommModes, ACommunicatorThatNeverComesUpTimesOut) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclInProgress);
  EpcGroupConfig c = small_config();
  c.timeout_ms = 1000;
  EpcGroup* group = reinterpret_cast<EpcGroup*>(0x10);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(epc_group_create(comm, &c, &group), EPC_ERR_TIMEOUT) << last_error();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string message = last_error();
  EXPECT_NE(message.find("the communicator's creation (ncclCommInitRankConfig) did not finish within 1000 ms"),
            std::string::npos)
      << message;
  EXPECT_EQ(group, reinterpret_cast<EpcGroup*>(0x10)) << "out-parameter written on failure";
  EXPECT_GE(seconds, 0.95);
  EXPECT_LT(seconds, 5.0);
  std::printf("TIMEOUT after %.2f s: %s\n", seconds, message.c_str());
  EXPECT_EQ(epc_comm_destroy(comm), EPC_OK) << last_error();
}

TEST(CommModes, CreationWithoutOneRankTimesOutOnANonBlockingCommunicator) {
  if (context().env.world_size < 2) GTEST_SKIP() << "needs a peer";
  ncclComm_t comm = nullptr;
  ASSERT_TRUE(nonblocking_comm(&comm));
  expect_creation_times_out(comm, "non-blocking");
  expect_a_group_on_the_suites_communicator();
}

TEST(CommModes, CreationWithoutOneRankTimesOutOnABlockingCommunicator) {
  if (context().env.world_size < 2) GTEST_SKIP() << "needs a peer";
  ncclUniqueId id;
  ASSERT_TRUE(shared_unique_id(&id));
  EpcUniqueId epc_id;
  std::memcpy(epc_id.bytes, id.internal, sizeof epc_id.bytes);
  void* comm = nullptr;
  ASSERT_EQ(epc_comm_init(&epc_id, context().env.world_size, my_rank(), context().env.device, &comm), EPC_OK)
      << last_error();
  // One all-reduce of every rank first: a blocking communicator makes its connections inside
  // its first collective's call, which a rank that never comes would block without bound.
  int64_t* value = nullptr;
  ASSERT_EQ(cudaMalloc(&value, sizeof *value), cudaSuccess);
  ASSERT_EQ(ncclAllReduce(value, value, 1, ncclInt64, ncclMax, static_cast<ncclComm_t>(comm), nullptr), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  cudaFree(value);
  expect_creation_times_out(comm, "blocking");
  expect_a_group_on_the_suites_communicator();
}

// ---- epc_comm_init_config's bound (since 2.3) -------------------------------------------

// A second communicator over the suite's ranks from epc_comm_init_config with a 60 s bound.
::testing::AssertionResult bounded_comm(void** comm) {
  ncclUniqueId id;
  auto shared = shared_unique_id(&id);
  if (!shared) return shared;
  EpcUniqueId epc_id;
  std::memcpy(epc_id.bytes, id.internal, sizeof epc_id.bytes);
  EpcCommConfig options = EPC_COMM_CONFIG_INIT;
  options.timeout_ms = 60000;
  if (epc_comm_init_config(&epc_id, context().env.world_size, my_rank(), context().env.device, &options, comm) !=
      EPC_OK) {
    return ::testing::AssertionFailure() << "epc_comm_init_config: " << last_error();
  }
  return ::testing::AssertionSuccess();
}

// A communicator made with a timeout is non-blocking: groups of both modes run on it, and
// epc_comm_destroy finalizes it within the bound.
TEST(CommModes, GroupsWorkOnABoundedCommunicator) {
  void* comm = nullptr;
  ASSERT_TRUE(bounded_comm(&comm));
  expect_groups_work_on(comm, 2800, "bounded communicator");
  all_ranks_sync();
  EXPECT_EQ(epc_comm_destroy(comm), EPC_OK) << last_error();
}

// A communicator of two ranks whose second rank never comes (nobody else has the id): the
// call returns TIMEOUT after about timeout_ms, writes nothing, leaves the current device as
// it was and leaves nothing to release. Runs alone on every rank, so on one GPU too.
TEST(CommModes, ABoundedCommunicatorWithoutItsSecondRankTimesOut) {
  EpcUniqueId id;
  ASSERT_EQ(epc_unique_id_create(&id), EPC_OK) << last_error();
  int before = -1;
  ASSERT_EQ(cudaGetDevice(&before), cudaSuccess);
  EpcCommConfig options = EPC_COMM_CONFIG_INIT;
  options.timeout_ms = 1000;
  void* comm = reinterpret_cast<void*>(0x10);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(epc_comm_init_config(&id, 2, 0, context().env.device, &options, &comm), EPC_ERR_TIMEOUT) << last_error();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string message = last_error();
  EXPECT_NE(message.find("rank 0 of 2: the communicator was not complete within 1000 ms"), std::string::npos)
      << message;
  EXPECT_EQ(comm, reinterpret_cast<void*>(0x10)) << "out-parameter written on failure";
  int after = -1;
  ASSERT_EQ(cudaGetDevice(&after), cudaSuccess);
  EXPECT_EQ(after, before);
  EXPECT_GE(seconds, 0.95);
  EXPECT_LT(seconds, 5.0);
  std::printf("TIMEOUT after %.2f s: %s\n", seconds, message.c_str());
}

// The last rank makes the communicator but never creates the group: the others'
// epc_group_create ends at its timeout_ms, with no all-reduce beforehand to connect the ranks
// (what a blocking communicator needs for the bound).
TEST(CommModes, CreationWithoutOneRankTimesOutOnABoundedCommunicator) {
  if (context().env.world_size < 2) GTEST_SKIP() << "needs a peer";
  void* comm = nullptr;
  ASSERT_TRUE(bounded_comm(&comm));
  expect_creation_times_out(comm, "bounded");
  expect_a_group_on_the_suites_communicator();
}

}  // namespace
}  // namespace epc::gputest
