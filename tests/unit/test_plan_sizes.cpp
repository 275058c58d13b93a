// SPDX-License-Identifier: Apache-2.0
// The window sizes of issue 27's shape (256 experts, hidden 7168, top-8, bf16; LL 128 and HT
// 4096 tokens per rank; nodes of 8 GPUs), as epc_plan_query and `epcomm-info --plan-only`
// report them, pinned in bytes, and how they grow with the rank count. One node must never
// change; the staging region of several nodes is worked out by hand from
// kernels/wire/staging_map.hpp below.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/planner.hpp"
#include "tests/unit/group_config.hpp"

namespace {

using epc::test::group_config;

constexpr uint32_t kLlTokens = 128, kHtTokens = 4096;

epc::Plan plan_of(EpcMode mode, int nranks, uint32_t tokens = 0) {
  const uint32_t t = tokens != 0 ? tokens : (mode == EPC_MODE_LOW_LATENCY ? kLlTokens : kHtTokens);
  return epc::make_plan(group_config(mode, 256, 7168, t, 8),
                        {nranks, nranks < 8 ? nranks : 8, nranks < 8 ? 1 : nranks / 8});
}
uint64_t window(EpcMode mode, int nranks, uint32_t tokens = 0) { return plan_of(mode, nranks, tokens).symmetric_bytes; }
uint64_t staging(EpcMode mode, int nranks, uint32_t tokens = 0) {
  return plan_of(mode, nranks, tokens).region(EPC_REGION_NET_STAGING).size;
}

// One node of 8: 56.22 MiB and 906.26 MiB, the layout that every one-node path runs on.
TEST(PlanSizes, OneNodeIsUnchanged) {
  EXPECT_EQ(window(EPC_MODE_LOW_LATENCY, 8), 58953728u);
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 8), 950280192u);
}

// Staging by hand, 16 ranks in 2 nodes (8 ranks outside each node, 1 other node), L = 16.
// Every staged row starts 16-byte aligned; the region is rounded to 256.
TEST(PlanSizes, StagingByHand) {
  // LL rank block: the barrier word (8 -> 16), then per slot (2): 128 message headers of 112
  // B (8 + 8 * 12 = 104 -> 112; 14336), 16 counts (64), the signal row (16), 128 partial
  // rows of 14336 B (1835008), the signal row (16): 16 + 2 * 1849440 = 3698896. Shared
  // block, per slot: 128 message payloads of 14448 - 112 = 14336 B, staged once for every
  // rank of the other node: 2 * 1835008 = 3670016. 8 * 3698896 + 3670016 = 33261184 ->
  // 33261312.
  EXPECT_EQ(staging(EPC_MODE_LOW_LATENCY, 16), 33261312u);
  // HT rank block: barrier 16, per layout slot (2): signal 16, round-two signal 16, words
  // (3 + L + R = 35 int32 = 140 -> 144), round-two words 64, then two acks 16 + 16:
  // 16 + 2 * 240 + 32 = 528. Rail block: 4096 rail slots of 14688 B (the 14624 B dispatch
  // slot, 8 int32 rows, 8 int32 entry places: 60162048), 2048 chunk flags (16384), 4096
  // partials of 14368 B (58851328), 2048 flags (16384) = 119046144.
  // 8 * 528 + 1 * 119046144 = 119050368 -> 119050496.
  EXPECT_EQ(staging(EPC_MODE_HIGH_THROUGHPUT, 16), 119050496u);
  // With EPC_GROUP_COMBINE_PER_ENTRY the rail block also holds 4096 * 8 entry rows of 14368 B
  // (470810624) beside the 4096 partials: 119046144 + 470810624 = 589856768;
  // 8 * 528 + 589856768 = 589860992 -> 589861120.
  auto per_entry = group_config(EPC_MODE_HIGH_THROUGHPUT, 256, 7168, kHtTokens, 8);
  per_entry.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  EXPECT_EQ(epc::make_plan(per_entry, {16, 8, 2}).region(EPC_REGION_NET_STAGING).size, 589861120u);
}

// Nodes of 8, the figures epcomm-info prints (docs/design.md): LL 144.2 / 313.0 / 650.8 MiB /
// 2.61 GiB at 16 / 32 / 64 / 256 ranks, HT 1.99 / 4.10 / 8.30 GiB at 16 / 32 / 64. Before the
// compact staging map (a mirror of the window per remote rank) they were LL 1061126144 /
// 5895073792 / 26881413120 / 469715767296 bytes and HT 18185822208 / 101032316928 /
// 460708024320 bytes; with it, before LL payloads were staged once (a message per remote
// rank), LL 176857088 / 412655616 / 884260864 / 3713875968 bytes; before the rail slots
// carried the entries' places (32 B more per rail slot, in the rail region and its staging:
// EXPERT_PACKED across nodes), HT 2139566080 / 4398051328 / 8915046400 bytes.
TEST(PlanSizes, SeveralNodesPinned) {
  EXPECT_EQ(window(EPC_MODE_LOW_LATENCY, 16), 151166976u);
  EXPECT_EQ(window(EPC_MODE_LOW_LATENCY, 32), 328245248u);
  EXPECT_EQ(window(EPC_MODE_LOW_LATENCY, 64), 682409984u);
  EXPECT_EQ(window(EPC_MODE_LOW_LATENCY, 256), 2807382016u);
  // HT: M nodes add M * 4096 * 32 B of rail slots and (M - 1) * 4096 * 32 B of their staging.
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 16), 2139566080u + (2 + 1) * 131072u);
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 16), 2139959296u);
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 32), 4398051328u + (4 + 3) * 131072u);
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 64), 8915046400u + (8 + 7) * 131072u);
}

// Issue 27's targets for LL at 128 tokens: at most 700 MiB at 64 ranks, 2.7 GiB at 256.
TEST(PlanSizes, LowLatencyMeetsTheTargets) {
  EXPECT_LE(window(EPC_MODE_LOW_LATENCY, 64), 700ull << 20);
  EXPECT_LE(window(EPC_MODE_LOW_LATENCY, 256), (27ull << 30) / 10);
}

// LL grows linearly in the rank count once it spans nodes: doubling the ranks adds twice
// what the previous doubling added (a square law would add four times), up to the rounding
// of rows and of the window (a few KiB per doubling). (From one node to two the window also
// gains the payloads staged once, a constant: the doublings are counted from 16 ranks.)
TEST(PlanSizes, LowLatencyGrowsLinearly) {
  uint64_t previous = window(EPC_MODE_LOW_LATENCY, 16);
  uint64_t previous_step = 0;
  for (int ranks = 32; ranks <= 256; ranks *= 2) {
    const uint64_t w = window(EPC_MODE_LOW_LATENCY, ranks);
    const uint64_t step = w - previous;
    if (previous_step != 0) {
      EXPECT_LE(step, 2 * previous_step + (64u << 10)) << ranks;
      EXPECT_GE(step + (64u << 10), 2 * previous_step) << ranks;
    }
    previous = w;
    previous_step = step;
  }
}

// HT: the receive regions grow as R * T and the staging as the other nodes times T; the
// layout words each rank stages for each remote rank (4 bytes per rank) are the one square
// term, under 1 MiB at 256 ranks. So at a fixed T, HT grows linearly too (steps within 2 MiB
// of linear), but it is not yet independent of T (that is the credit rings' work).
TEST(PlanSizes, HighThroughputGrowsLinearlyInRanks) {
  uint64_t previous = window(EPC_MODE_HIGH_THROUGHPUT, 16, 1024);
  uint64_t previous_step = 0;
  for (int ranks = 32; ranks <= 256; ranks *= 2) {
    const uint64_t w = window(EPC_MODE_HIGH_THROUGHPUT, ranks, 1024);
    const uint64_t step = w - previous;
    if (previous_step != 0) {
      EXPECT_LE(step, 2 * previous_step + (2u << 20)) << ranks;
    }
    previous = w;
    previous_step = step;
  }
  // Staging per other node, T = 4096 -> 16384: four times the rail block.
  const uint64_t at_4k = staging(EPC_MODE_HIGH_THROUGHPUT, 16);
  const uint64_t at_16k = staging(EPC_MODE_HIGH_THROUGHPUT, 16, 16384);
  EXPECT_GT(at_16k, 3 * at_4k);
  EXPECT_LT(at_16k, 4 * at_4k);
}

}  // namespace
