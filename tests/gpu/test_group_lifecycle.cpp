// SPDX-License-Identifier: Apache-2.0
// Group lifecycle on real GPUs: create (window, device communicator, barrier kernel),
// query, barriers, destroy, and create again on the same communicator.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstring>

#include "tests/gpu/rank_context.hpp"

namespace epc::gputest {
namespace {

EpcGroupInfo query(const EpcGroup* group) {
  EpcGroupInfo info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.abi_version = EPC_ABI_VERSION;
  EXPECT_EQ(epc_group_query(group, &info), EPC_OK) << last_error();
  return info;
}

uint64_t planned_bytes(const EpcGroupConfig& c, int nranks) {
  EpcPlan plan;
  std::memset(&plan, 0, sizeof plan);
  plan.struct_size = sizeof plan;
  plan.abi_version = EPC_ABI_VERSION;
  EXPECT_EQ(epc_plan_query(&c, nranks, nranks, 1, &plan), EPC_OK) << last_error();
  return plan.symmetric_bytes;
}

void expect_topology(const EpcGroupInfo& info, const EpcGroupConfig& c) {
  const auto& env = context().env;
  EXPECT_EQ(info.rank, env.rank);
  EXPECT_EQ(info.nranks, env.world_size);
  // One host: every rank is in one NVLink (LSA) team.
  EXPECT_EQ(info.lsa_size, env.world_size);
  EXPECT_EQ(info.lsa_rank, env.rank);
  EXPECT_EQ(info.num_nodes, 1);
  EXPECT_EQ(info.node, 0);
  EXPECT_EQ(info.cuda_device, env.device);
  EXPECT_EQ(info.mode, c.mode);
  EXPECT_EQ(info.num_experts, c.num_experts);
  EXPECT_EQ(info.local_experts, c.num_experts / static_cast<uint32_t>(env.world_size));
  EXPECT_EQ(info.hidden, c.hidden);
  EXPECT_EQ(info.timeout_ms, c.timeout_ms);
  EXPECT_EQ(info.symmetric_bytes, planned_bytes(c, env.world_size));
  EXPECT_GT(info.symmetric_bytes, 0u);
}

TEST(GroupLifecycle, CreateBarrierQueryDestroyAndCreateAgain) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT, EPC_MODE_LOW_LATENCY}) {
    EpcGroupConfig c = small_config(mode);
    EpcGroup* group = nullptr;
    ASSERT_EQ(epc_group_create(context().comm, &c, &group), EPC_OK) << last_error();
    ASSERT_NE(group, nullptr);
    expect_topology(query(group), c);
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(epc_group_barrier(group, stream), EPC_OK) << last_error();
    }
    ASSERT_EQ(epc_group_barrier(group, nullptr), EPC_OK) << last_error();
    ASSERT_EQ(epc_group_destroy(group), EPC_OK) << last_error();
  }
  cudaStreamDestroy(stream);
}

TEST(GroupLifecycle, TwoGroupsOnOneCommunicator) {
  EpcGroupConfig ll = small_config(EPC_MODE_LOW_LATENCY);
  EpcGroupConfig ht = small_config(EPC_MODE_HIGH_THROUGHPUT);
  EpcGroup* a = nullptr;
  EpcGroup* b = nullptr;
  ASSERT_EQ(epc_group_create(context().comm, &ll, &a), EPC_OK) << last_error();
  ASSERT_EQ(epc_group_create(context().comm, &ht, &b), EPC_OK) << last_error();
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(epc_group_barrier(a, nullptr), EPC_OK) << last_error();
    ASSERT_EQ(epc_group_barrier(b, nullptr), EPC_OK) << last_error();
  }
  EXPECT_NE(query(a).symmetric_bytes, query(b).symmetric_bytes);
  ASSERT_EQ(epc_group_destroy(b), EPC_OK) << last_error();
  ASSERT_EQ(epc_group_destroy(a), EPC_OK) << last_error();
}

TEST(GroupLifecycle, ManyBackToBackBarriers) {
  EpcGroupConfig c = small_config();
  EpcGroup* group = nullptr;
  ASSERT_EQ(epc_group_create(context().comm, &c, &group), EPC_OK) << last_error();
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(epc_group_barrier(group, nullptr), EPC_OK) << "barrier " << i << ": " << last_error();
  }
  ASSERT_EQ(epc_group_destroy(group), EPC_OK) << last_error();
}

// A caller allocator that hands out ncclMemAlloc memory and counts what it did.
struct CountingAllocator {
  int allocs = 0;
  int frees = 0;
  size_t bytes = 0;
  void* last = nullptr;
};

int32_t counting_alloc(void* ctx, size_t bytes, void** out) {
  auto* a = static_cast<CountingAllocator*>(ctx);
  if (ncclMemAlloc(out, bytes) != ncclSuccess) return 1;
  a->allocs++;
  a->bytes = bytes;
  a->last = *out;
  return 0;
}

void counting_free(void* ctx, void* ptr) {
  auto* a = static_cast<CountingAllocator*>(ctx);
  if (ptr == a->last) a->frees++;
  ncclMemFree(ptr);
}

TEST(GroupLifecycle, CallerAllocatorIsUsedWithItsContext) {
  CountingAllocator counter;
  EpcGroupConfig c = small_config();
  c.alloc_fn = &counting_alloc;
  c.free_fn = &counting_free;
  c.alloc_ctx = &counter;
  EpcGroup* group = nullptr;
  ASSERT_EQ(epc_group_create(context().comm, &c, &group), EPC_OK) << last_error();
  EXPECT_EQ(counter.allocs, 1);
  EXPECT_EQ(counter.bytes, query(group).symmetric_bytes);
  ASSERT_EQ(epc_group_barrier(group, nullptr), EPC_OK) << last_error();
  ASSERT_EQ(epc_group_destroy(group), EPC_OK) << last_error();
  EXPECT_EQ(counter.frees, 1);
}

}  // namespace
}  // namespace epc::gputest
