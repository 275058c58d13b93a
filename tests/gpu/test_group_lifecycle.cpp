// SPDX-License-Identifier: Apache-2.0
// Group lifecycle on real GPUs: create (window, device communicator, barrier kernel),
// query, barriers, destroy (refused while handles are alive), and create again on the same
// communicator.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/gpu/gpu_case_common.hpp"
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

// A group whose handles are alive is not destroyed: the handles refer to its memory and
// window. The refusal names each handle and leaves the group working; once they are
// destroyed, so is the group. Every rank makes the same calls.
TEST(GroupLifecycle, DestroyWithLiveHandlesIsRefused) {
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    EpcGroupConfig c = small_config(mode);
    EpcGroup* group = nullptr;
    ASSERT_EQ(epc_group_create(context().comm, &c, &group), EPC_OK) << last_error();
    EpcHandle* first = nullptr;
    EpcHandle* second = nullptr;
    ASSERT_EQ(epc_handle_create(group, nullptr, nullptr, nullptr, &first), EPC_OK) << last_error();
    ASSERT_EQ(epc_handle_create(group, nullptr, nullptr, nullptr, &second), EPC_OK) << last_error();
    EXPECT_EQ(epc_group_destroy(group), EPC_ERR_INVALID_USAGE);
    const std::string message = last_error();
    EXPECT_NE(message.find("2 live handle(s)"), std::string::npos) << message;
    ASSERT_EQ(epc_handle_destroy(first), EPC_OK) << last_error();
    EXPECT_EQ(epc_group_destroy(group), EPC_ERR_INVALID_USAGE);
    EXPECT_NE(last_error().find("1 live handle(s)"), std::string::npos) << last_error();
    ASSERT_EQ(epc_group_barrier(group, nullptr), EPC_OK) << last_error();  // still a working group
    ASSERT_EQ(epc_handle_destroy(second), EPC_OK) << last_error();
    ASSERT_EQ(epc_group_destroy(group), EPC_OK) << last_error();
  }
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

// Across virtual nodes (every node size that splits this world: 1 at 2 ranks, 1 and 2 at 4)
// the window a group registers, and allocates through the caller's allocator, is the one
// epc_plan_query gives for the same config, staging region included: LL and HT groups with
// and without EPC_GROUP_COMBINE_PER_ENTRY. The flag's window is larger in both modes (LL: a
// row per entry in combine_recv and in staging; HT: max_topk combine slots per token, and
// the entry rows staged for the rail peers).
TEST(GroupLifecycle, WindowAcrossVirtualNodesIsWhatThePlanSays) {
  const int world = context().env.world_size;
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  for (int node_size : sizes) {
    for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
      uint64_t without_flag = 0;
      for (uint32_t flags : {0u, static_cast<uint32_t>(EPC_GROUP_COMBINE_PER_ENTRY)}) {
        SCOPED_TRACE(testing::Message() << (mode == EPC_MODE_LOW_LATENCY ? "LL" : "HT") << ", virtual nodes of "
                                        << node_size << ", flags " << flags);
        CountingAllocator counter;
        EpcGroupConfig c = small_config(mode);
        c.max_tokens_per_rank = mode == EPC_MODE_LOW_LATENCY ? 32 : 256;
        c.flags = flags;
        c.virtual_node_size = static_cast<uint32_t>(node_size);
        c.alloc_fn = &counting_alloc;
        c.free_fn = &counting_free;
        c.alloc_ctx = &counter;
        EpcPlan plan;
        std::memset(&plan, 0, sizeof plan);
        plan.struct_size = sizeof plan;
        plan.abi_version = EPC_ABI_VERSION;
        ASSERT_EQ(epc_plan_query(&c, world, world, 1, &plan), EPC_OK) << last_error();
        ASSERT_GT(plan.num_regions, 0u);
        bool staged = false;
        for (uint32_t i = 0; i < plan.num_regions; ++i) staged |= plan.regions[i].kind == EPC_REGION_NET_STAGING;
        EXPECT_TRUE(staged);
        EpcGroup* group = nullptr;
        ASSERT_EQ(epc_group_create(context().comm, &c, &group), EPC_OK) << last_error();
        const EpcGroupInfo info = query(group);
        EXPECT_EQ(info.num_nodes, world / node_size);
        EXPECT_EQ(info.node, context().env.rank / node_size);
        EXPECT_EQ(info.symmetric_bytes, plan.symmetric_bytes);
        EXPECT_EQ(counter.allocs, 1);
        EXPECT_EQ(counter.bytes, plan.symmetric_bytes);
        ASSERT_EQ(epc_group_barrier(group, nullptr), EPC_OK) << last_error();
        ASSERT_EQ(epc_group_destroy(group), EPC_OK) << last_error();
        EXPECT_EQ(counter.frees, 1);
        if (flags == 0) {
          without_flag = plan.symmetric_bytes;
        } else {
          EXPECT_GT(plan.symmetric_bytes, without_flag);
        }
      }
    }
  }
}

}  // namespace
}  // namespace epc::gputest
