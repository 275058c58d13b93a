// SPDX-License-Identifier: Apache-2.0
// Bad input and failing peers on real GPUs: specific statuses and messages, no collective
// left half-done (one rank's failed allocation fails every rank before any collective step),
// and a communicator that stays usable afterwards.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "tests/gpu/rank_context.hpp"

namespace epc::gputest {
namespace {

void expect_create_fails(const EpcGroupConfig& c, EpcStatus status, const char* message_part) {
  EpcGroup* group = reinterpret_cast<EpcGroup*>(0x10);
  EXPECT_EQ(epc_group_create(context().comm, &c, &group), status) << last_error();
  EXPECT_NE(last_error().find(message_part), std::string::npos) << last_error();
  EXPECT_EQ(group, reinterpret_cast<EpcGroup*>(0x10)) << "out-parameter written on failure";
}

// A host-side rendezvous of all ranks, independent of epcomm.
void all_ranks_sync() {
  int* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, sizeof(int)), cudaSuccess);
  ASSERT_EQ(ncclAllReduce(buf, buf, 1, ncclInt32, ncclSum, static_cast<ncclComm_t>(context().comm), nullptr),
            ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  cudaFree(buf);
}

TEST(GroupErrors, InvalidConfigsAreRejectedBeforeAnyCollective) {
  const int world = context().env.world_size;
  EpcGroupConfig c = small_config();
  if (world > 1) {
    c.num_experts = 8u * static_cast<uint32_t>(world) + 1;
    expect_create_fails(c, EPC_ERR_INVALID_ARGUMENT, "divisible");
  }
  c = small_config();
  c.hidden = 0;
  expect_create_fails(c, EPC_ERR_INVALID_ARGUMENT, "hidden");
  c = small_config();
  c.max_token_bytes = c.hidden;  // below the fp8 row (H + H / 32)
  expect_create_fails(c, EPC_ERR_INVALID_ARGUMENT, "max_token_bytes");
  // Defined by the ABI, not served: more pending send-only steps than 3, a smaller receive
  // window than R * T (LL), the per-entry combine window (LL); in both modes.
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    c = small_config(mode);
    c.max_pending_steps = 4;
    expect_create_fails(c, EPC_ERR_UNSUPPORTED, "max_pending_steps");
    if (mode == EPC_MODE_LOW_LATENCY) {  // HT serves smaller windows (test_ht_capacity.cpp)
      c = small_config(mode);
      c.recv_capacity = static_cast<uint64_t>(world) * c.max_tokens_per_rank - 1;
      expect_create_fails(c, EPC_ERR_UNSUPPORTED, "recv_capacity");
    }
  }
  c = small_config();
  c.struct_size = 4;
  expect_create_fails(c, EPC_ERR_ABI_MISMATCH, "struct_size");
  c = small_config();
  EpcGroup* group = nullptr;
  EXPECT_EQ(epc_group_create(nullptr, &c, &group), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(epc_group_create(context().comm, &c, nullptr), EPC_ERR_INVALID_ARGUMENT);

  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices > 1) {
    const int own = context().env.device;
    ASSERT_EQ(cudaSetDevice((own + 1) % devices), cudaSuccess);
    expect_create_fails(small_config(), EPC_ERR_INVALID_ARGUMENT, "current CUDA device");
    ASSERT_EQ(cudaSetDevice(own), cudaSuccess);
  }

  // The communicator is unharmed: a valid group still comes up.
  ASSERT_EQ(epc_group_create(context().comm, &c, &group), EPC_OK) << last_error();
  ASSERT_EQ(epc_group_barrier(group, nullptr), EPC_OK) << last_error();
  ASSERT_EQ(epc_group_destroy(group), EPC_OK) << last_error();
}

TEST(GroupErrors, BarrierTimeoutNamesTheMissingRank) {
  const int world = context().env.world_size;
  if (world < 2) GTEST_SKIP() << "needs a peer";
  const int absent = world - 1;
  EpcGroupConfig c = small_config();
  c.timeout_ms = 1000;
  EpcGroup* group = nullptr;
  ASSERT_EQ(epc_group_create(context().comm, &c, &group), EPC_OK) << last_error();

  if (context().env.rank != absent) {
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(epc_group_barrier(group, nullptr), EPC_ERR_TIMEOUT);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string message = last_error();
    EXPECT_NE(message.find("group barrier"), std::string::npos) << message;
    EXPECT_NE(message.find("for rank " + std::to_string(absent)), std::string::npos) << message;
    EXPECT_NE(message.find("rank " + std::to_string(context().env.rank) + " waited"), std::string::npos) << message;
    EXPECT_GE(seconds, 0.9);
    EXPECT_LT(seconds, 5.0);
    std::printf("timeout reported after %.2f s: %s\n", seconds, message.c_str());
    // Sticky: the group stays failed and says why, without launching anything.
    EXPECT_EQ(epc_group_barrier(group, nullptr), EPC_ERR_TIMEOUT);
    EXPECT_NE(last_error().find("for rank " + std::to_string(absent)), std::string::npos);
    // Querying a failed group still works.
    EpcGroupInfo info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    info.abi_version = EPC_ABI_VERSION;
    EXPECT_EQ(epc_group_query(group, &info), EPC_OK);
  }
  // Nobody may release its window while a peer's timed-out kernel could still write to it.
  all_ranks_sync();
  EXPECT_EQ(epc_group_destroy(group), EPC_OK) << last_error();

  // The communicator survives: a fresh group works on every rank.
  ASSERT_EQ(epc_group_create(context().comm, &c, &group), EPC_OK) << last_error();
  ASSERT_EQ(epc_group_barrier(group, nullptr), EPC_OK) << last_error();
  ASSERT_EQ(epc_group_destroy(group), EPC_OK) << last_error();
}

int32_t cuda_malloc_alloc(void*, size_t bytes, void** out) { return cudaMalloc(out, bytes) == cudaSuccess ? 0 : 1; }
void cuda_malloc_free(void*, void* ptr) { cudaFree(ptr); }

// NCCL windows need memory it can map into peers (ncclMemAlloc or CUDA VMM); plain
// cudaMalloc memory is either accepted by this NCCL or refused with a message naming the
// caller's allocator, never a crash or hang.
TEST(GroupErrors, AllocatorMemoryNcclCannotRegisterIsReported) {
  EpcGroupConfig c = small_config();
  c.alloc_fn = &cuda_malloc_alloc;
  c.free_fn = &cuda_malloc_free;
  EpcGroup* group = nullptr;
  EpcStatus s = epc_group_create(context().comm, &c, &group);
  if (s == EPC_OK) {
    std::printf("note: this NCCL registered cudaMalloc memory as a window\n");
    EXPECT_EQ(epc_group_barrier(group, nullptr), EPC_OK) << last_error();
    EXPECT_EQ(epc_group_destroy(group), EPC_OK) << last_error();
  } else {
    EXPECT_EQ(s, EPC_ERR_NCCL) << last_error();
    EXPECT_NE(last_error().find("alloc_fn"), std::string::npos) << last_error();
    std::printf("refused as expected: %s\n", last_error().c_str());
  }
}

// An allocator that refuses on the last rank only: a rank-local failure in the middle of a
// collective creation. That rank reports its allocator's refusal, every other rank the rank
// that failed (before any collective step, so none waits for it); nothing is left allocated,
// and a group created next on the same communicator works.
int32_t refusing_alloc(void*, size_t, void** out) {
  *out = nullptr;
  return 7;
}
void never_freed(void*, void*) { ADD_FAILURE() << "free_fn called for memory that was never allocated"; }

TEST(GroupErrors, OneRanksAllocatorFailingFailsEveryRank) {
  const int last = context().env.world_size - 1;
  EpcGroupConfig c = small_config();
  if (context().env.rank == last) {
    c.alloc_fn = &refusing_alloc;
    c.free_fn = &never_freed;
    expect_create_fails(c, EPC_ERR_OUT_OF_MEMORY, "alloc_fn returned 7");
  } else {
    expect_create_fails(c, EPC_ERR_OUT_OF_MEMORY,
                        ("rank " + std::to_string(last) + " could not prepare its part of the group").c_str());
  }
  EpcGroup* group = nullptr;
  const EpcGroupConfig good = small_config();
  ASSERT_EQ(epc_group_create(context().comm, &good, &group), EPC_OK) << last_error();
  EXPECT_EQ(epc_group_barrier(group, nullptr), EPC_OK) << last_error();
  EXPECT_EQ(epc_group_destroy(group), EPC_OK) << last_error();
}

}  // namespace
}  // namespace epc::gputest
