// SPDX-License-Identifier: Apache-2.0
// The window sizes of issue 27's shape (256 experts, hidden 7168, top-8, bf16; LL 128 and HT
// 4096 tokens per rank; nodes of 8 GPUs), as epc_plan_query and `epcomm-info --plan-only`
// report them, pinned in bytes, and how they grow with the rank count. One node must never
// change; the staging region of several nodes is worked out by hand from
// kernels/wire/staging_map.hpp below.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/planner.hpp"
#include "tests/harness/scoped_env.hpp"
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

// One node of 8: 67.2 MiB (56.22 MiB of it before the combine's line records, 2 slots * 8
// ranks * 16 * 2 * 14336 bytes = 7340032, and the dispatch's line records of steps of up to 9
// tokens, 2 slots * (8 ranks * 9 * 2 * 14448 + 8 * 32 * 8 line words) = 4165120; 70458880
// rounded up to 4096) and 906.26 MiB, the layout that every one-node path runs on.
TEST(PlanSizes, OneNodeIsUnchanged) {
  EXPECT_EQ(window(EPC_MODE_LOW_LATENCY, 8), 70459392u);
  EXPECT_EQ(58953728u + 2u * 8u * 16u * 2u * 14336u + 2u * (8u * 9u * 2u * 14448u + 8u * 32u * 8u), 70458880u);
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
  const epc::test::ScopedEnv parts("EPCOMM_HT_PART_TOKENS", "512");
  // HT rank block: barrier 16, per layout slot (2): signal 16, round-two signal 16, words
  // (3 + L + R = 35 int32 = 140 -> 144), round-two words 64, then two acks 16 + 16:
  // 16 + 2 * 240 + 32 = 528. Rail block, parts of 512 tokens (EPCOMM_HT_PART_TOKENS=512,
  // core/ht/ht_parts.hpp): 512
  // rail slots of 14688 B (the 14624 B dispatch slot, 8 int32 rows, 8 int32 entry places:
  // 7520256), 256 chunk flags (2048), 512 partials of 14368 B (7356416), 256 flags (2048) =
  // 14880768. 8 * 528 + 1 * 14880768 = 14884992 -> 14885120.
  EXPECT_EQ(staging(EPC_MODE_HIGH_THROUGHPUT, 16), 14885120u);
  // With EPC_GROUP_COMBINE_PER_ENTRY the rail block also holds 512 * 8 entry rows of 14368 B
  // (58851328) beside the 512 partials: 73732096; 8 * 528 + 73732096 = 73736320 -> 73736448.
  auto per_entry = group_config(EPC_MODE_HIGH_THROUGHPUT, 256, 7168, kHtTokens, 8);
  per_entry.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  EXPECT_EQ(epc::make_plan(per_entry, {16, 8, 2}).region(EPC_REGION_NET_STAGING).size, 73736448u);
  // With whole steps (EPCOMM_HT_PART_TOKENS=0) the rail block holds 4096 tokens: 60162048 +
  // 16384 + 58851328 + 16384 = 119046144; 8 * 528 + 119046144 = 119050368 -> 119050496; per
  // entry 4096 * 8 rows more: 589861120.
  const epc::test::ScopedEnv whole_steps("EPCOMM_HT_PART_TOKENS", "0");  // over the 512 above
  EXPECT_EQ(staging(EPC_MODE_HIGH_THROUGHPUT, 16), 119050496u);
  EXPECT_EQ(epc::make_plan(per_entry, {16, 8, 2}).region(EPC_REGION_NET_STAGING).size, 589861120u);
}

// Nodes of 8, the figures epcomm-info prints (docs/design.md): LL 144.2 / 313.0 / 650.8 MiB /
// 2.61 GiB at 16 / 32 / 64 / 256 ranks, HT 685.6 / 655.5 / 664.4 / 537.9 MiB at 16 / 32 / 64
// / 256 in parts of 1376 / 640 / 320 / 64 tokens (the most under kHtWindowBudget, 688 MiB).
// In parts of 512 tokens HT was 255.1 / 524.4 / 1063.1 MiB at 16 / 32 / 64. Before the compact staging map (a mirror of the window per remote rank)
// they were LL 1061126144 / 5895073792 / 26881413120 / 469715767296 bytes and HT 18185822208
// / 101032316928 / 460708024320 bytes; with it, before LL payloads were staged once (a
// message per remote rank), LL 176857088 / 412655616 / 884260864 / 3713875968 bytes; before
// the rail slots carried the entries' places (32 B more per rail slot, in the rail region and
// its staging: EXPERT_PACKED across nodes), HT 2139566080 / 4398051328 / 8915046400 bytes,
// and with them, before steps ran in parts, the whole-step figures pinned below.
TEST(PlanSizes, SeveralNodesPinned) {
  EXPECT_EQ(window(EPC_MODE_LOW_LATENCY, 16), 151166976u);
  EXPECT_EQ(window(EPC_MODE_LOW_LATENCY, 32), 328245248u);
  EXPECT_EQ(window(EPC_MODE_LOW_LATENCY, 64), 682409984u);
  EXPECT_EQ(window(EPC_MODE_LOW_LATENCY, 256), 2807382016u);
  EXPECT_EQ(plan_of(EPC_MODE_HIGH_THROUGHPUT, 16).ht_part_tokens, 1376u);
  EXPECT_EQ(plan_of(EPC_MODE_HIGH_THROUGHPUT, 32).ht_part_tokens, 640u);
  EXPECT_EQ(plan_of(EPC_MODE_HIGH_THROUGHPUT, 64).ht_part_tokens, 320u);
  EXPECT_EQ(plan_of(EPC_MODE_HIGH_THROUGHPUT, 256).ht_part_tokens, 64u);
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 16), 718901248u);
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 32), 687366144u);
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 64), 696717312u);
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 256), 563990528u);
  {
    const epc::test::ScopedEnv parts("EPCOMM_HT_PART_TOKENS", "512");
    EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 16), 267505664u);
    EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 32), 549896192u);
    EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 64), 1114701824u);
  }
  // Whole steps: M nodes add M * 4096 * 32 B of rail slots and (M - 1) * 4096 * 32 B of
  // their staging.
  const epc::test::ScopedEnv whole_steps("EPCOMM_HT_PART_TOKENS", "0");
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 16), 2139566080u + (2 + 1) * 131072u);
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 16), 2139959296u);
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 32), 4398051328u + (4 + 3) * 131072u);
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 64), 8915046400u + (8 + 7) * 131072u);
}

// Issue 27's targets for HT at 4096 tokens: at most 700 MiB at 16 ranks and 1.2 GiB at 64,
// and independent of the token count across nodes (16 ranks at 4096 and 16384 tokens within
// 5%: the same window, parts of 1376 tokens either way).
TEST(PlanSizes, HighThroughputMeetsTheTargets) {
  EXPECT_LE(window(EPC_MODE_HIGH_THROUGHPUT, 16), 700ull << 20);
  EXPECT_LE(window(EPC_MODE_HIGH_THROUGHPUT, 64), (12ull << 30) / 10);
  EXPECT_EQ(window(EPC_MODE_HIGH_THROUGHPUT, 16, 16384), window(EPC_MODE_HIGH_THROUGHPUT, 16));
  // One node runs whole steps: its 906 MiB stay (OneNodeIsUnchanged).
  EXPECT_EQ(plan_of(EPC_MODE_HIGH_THROUGHPUT, 8).ht_part_tokens, kHtTokens);
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

// HT: the receive regions grow as R * P and the staging as the other nodes times P (P the
// tokens of a part, or T with whole steps); the layout words each rank stages for each remote
// rank (4 bytes per rank) are the one square term, under 1 MiB at 256 ranks. So HT grows
// linearly (steps within 2 MiB of linear), and with parts not with T.
TEST(PlanSizes, HighThroughputGrowsLinearlyInRanks) {
  const epc::test::ScopedEnv parts("EPCOMM_HT_PART_TOKENS", "512");  // a part the same at every size
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
  // Staging per other node, T = 4096 -> 16384: the same in parts; four times the rail block
  // with whole steps.
  EXPECT_EQ(staging(EPC_MODE_HIGH_THROUGHPUT, 16, 16384), staging(EPC_MODE_HIGH_THROUGHPUT, 16));
  const epc::test::ScopedEnv whole_steps("EPCOMM_HT_PART_TOKENS", "0");  // over the 512 above
  const uint64_t at_4k = staging(EPC_MODE_HIGH_THROUGHPUT, 16);
  const uint64_t at_16k = staging(EPC_MODE_HIGH_THROUGHPUT, 16, 16384);
  EXPECT_GT(at_16k, 3 * at_4k);
  EXPECT_LT(at_16k, 4 * at_4k);
}

}  // namespace
