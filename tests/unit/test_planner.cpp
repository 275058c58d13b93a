// SPDX-License-Identifier: Apache-2.0
// The planner's byte layouts (core/planner.cpp). Expected numbers are worked out by hand in
// the comments from the layout rules documented in planner.hpp.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "core/ht/ht_parts.hpp"
#include "core/plan.hpp"
#include "core/planner.hpp"
#include "kernels/wire/ll_message.hpp"
#include "kernels/wire/shared_bytes.hpp"
#include "tests/harness/scoped_env.hpp"
#include "tests/unit/group_config.hpp"

namespace {

using epc::test::group_config;

TEST(Planner, LowLatencyDecodeLayoutByHand) {
  // 4 ranks, 256 experts (64 local), hidden 7168, 128 tokens, top-8.
  auto c = group_config(EPC_MODE_LOW_LATENCY, 256, 7168, 128, 8);
  epc::Plan p = epc::make_plan(c, {4, 4, 1});
  // Header: 8 bytes (token index, entry count) + 8 entries * 12 (local expert, position,
  // weight) = 104 -> 112. Row: 14336.
  EXPECT_EQ(p.message_bytes, 112u + 14336u);
  EXPECT_EQ(p.num_slots, 2u);
  ASSERT_EQ(p.regions.size(), 9u);
  // control: the barrier inbox, 4 ranks * 8 B = 32 -> 256.
  EXPECT_EQ(p.region(EPC_REGION_CONTROL).offset, 0u);
  EXPECT_EQ(p.region(EPC_REGION_CONTROL).size, 256u);
  // dispatch_recv[0]: 4 * 128 * 14448 = 7397376 messages + the count table 4 * 64 * 4 = 1024
  // = 7398400 (a multiple of 16), then the line steps' records: steps of up to
  // min(16, 131072 / 14448) = 9 tokens (kernels::ll_dispatch_line_steps), 4 * 9 * 2 * 14448 =
  // 1040256, and the table's line words 2 * 1024 = 2048: 8440704, rounded up to 256: 8440832.
  EXPECT_EQ(epc::kernels::ll_dispatch_line_steps(16, 14448), 9);
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV, 0).offset, 256u);
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV, 0).size, 8440832u);
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_SIGNAL, 0).offset, 8441088u);
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_SIGNAL, 0).size, 256u);
  // combine_recv[0]: the partials 4 * 128 * 14336 = 7340032, then 4 * 16 line records of
  // 2 * 14336 = 1835008 (one node, kLlLineTokens 16): 9175040.
  EXPECT_EQ(p.ll_line_tokens, 16u);
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_RECV, 0).offset, 8441344u);
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_RECV, 0).size, 9175040u);
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_SIGNAL, 0).offset, 17616384u);
  // A slot spans 8440832 + 256 + 9175040 + 256 = 17616384 bytes.
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV, 1).offset, 17616640u);
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_SIGNAL, 1).offset, 35232768u);
  // End 35233024, rounded up to 4096: 8602 * 4096.
  EXPECT_EQ(p.symmetric_bytes, 35233792u);
  // Step counters (256) + two slots of 256 expert counts.
  EXPECT_EQ(p.workspace_bytes, 256u);
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV, 1).name, "dispatch_recv[1]");
  EXPECT_EQ(p.gin_contexts, 0u);
  EXPECT_EQ(p.lsa_barriers, 0u);
  EXPECT_EQ(p.num_sms, 132u);
}

// The combine's line records (core/plan.hpp): [R][kLlLineTokens] on one node, never more
// than max_tokens, none across nodes or with per-entry rows; the environment sets the count
// (0: none, the window of epcomm 2.1) and refuses what is not one.
TEST(Planner, LineRecordsOnOneNodeOnly) {
  auto c = group_config(EPC_MODE_LOW_LATENCY, 256, 7168, 128, 8);
  EXPECT_EQ(epc::ll_line_tokens(c, 1), 16u);
  EXPECT_EQ(epc::ll_line_tokens(c, 2), 0u);
  c.max_tokens_per_rank = 4;
  EXPECT_EQ(epc::ll_line_tokens(c, 1), 4u);
  c.max_tokens_per_rank = 128;
  c.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  EXPECT_EQ(epc::ll_line_tokens(c, 1), 0u);
  c.flags = 0;
  {
    const epc::test::ScopedEnv off("EPCOMM_LL_LINE_TOKENS", "0");
    const epc::Plan p = epc::make_plan(c, {4, 4, 1});
    EXPECT_EQ(p.ll_line_tokens, 0u);
    // LowLatencyDecodeLayoutByHand's window without the 2 * 1835008 bytes of line records.
    EXPECT_EQ(p.region(EPC_REGION_COMBINE_RECV, 0).size, 7340032u);
    EXPECT_EQ(p.symmetric_bytes, 29478912u);
  }
  {
    const epc::test::ScopedEnv more("EPCOMM_LL_LINE_TOKENS", "100");
    const epc::Plan p = epc::make_plan(c, {4, 4, 1});
    EXPECT_EQ(p.ll_line_tokens, 100u);
    EXPECT_EQ(p.region(EPC_REGION_COMBINE_RECV, 0).size, 7340032u + 4u * 100u * 2u * 14336u);
  }
  const epc::test::ScopedEnv bad("EPCOMM_LL_LINE_TOKENS", "many");
  try {
    (void)epc::make_plan(c, {4, 4, 1});
    FAIL() << "an EPCOMM_LL_LINE_TOKENS that is not a count was taken";
  } catch (const epc::Error& e) {
    EXPECT_EQ(e.status(), EPC_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("EPCOMM_LL_LINE_TOKENS"), std::string::npos) << e.what();
  }
}

// max_pending_steps 1 and 2 (the default) keep the two-slot window above; each pending step
// more adds one slot per direction (4 regions, 17616384 bytes here). Above 3 the configuration
// check refuses it (tests/unit/test_config.cpp).
TEST(Planner, PendingStepsGrowTheLowLatencyWindow) {
  auto c = group_config(EPC_MODE_LOW_LATENCY, 256, 7168, 128, 8);
  for (uint32_t pending : {1u, 2u}) {
    c.max_pending_steps = pending;
    const epc::Plan p = epc::make_plan(c, {4, 4, 1});
    EXPECT_EQ(p.num_slots, 2u) << pending;
    EXPECT_EQ(p.max_pending_steps, pending);
    EXPECT_EQ(p.regions.size(), 9u) << pending;
    EXPECT_EQ(p.symmetric_bytes, 35233792u) << pending;
  }
  c.max_pending_steps = 3;
  const epc::Plan p = epc::make_plan(c, {4, 4, 1});
  EXPECT_EQ(p.num_slots, 3u);
  ASSERT_EQ(p.regions.size(), 13u);
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV, 2).offset, 256u + 2u * 17616384u);
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV, 2).name, "dispatch_recv[2]");
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_SIGNAL, 2).offset, 17616384u + 2u * 17616384u);
  // End 256 + 3 * 17616384 = 52849408, rounded up to 4096: 12903 * 4096.
  EXPECT_EQ(p.symmetric_bytes, 52850688u);
  // Each slot's signal region holds a step signal and a credit per rank: 4 * 16 -> 256.
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_SIGNAL, 2).size, 256u);
}

// EPC_GROUP_COMBINE_PER_ENTRY on a low-latency group: each combine slot holds a row per
// (source, token, message entry), [R][T][max_topk] (EPC_WEIGHTING_HOME); the dispatch
// regions keep LowLatencyDecodeLayoutByHand's sizes.
TEST(Planner, LowLatencyPerEntryCombineSlotsHoldARowPerEntry) {
  auto c = group_config(EPC_MODE_LOW_LATENCY, 256, 7168, 128, 8);
  c.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  EXPECT_EQ(epc::ll_combine_rows_per_token(c), 8u);
  const epc::Plan p = epc::make_plan(c, {4, 4, 1});
  ASSERT_EQ(p.regions.size(), 9u);
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV, 0).size, 7398400u);
  // combine_recv[0]: 4 * 128 * 8 * 14336 = 58720256, eight times the partials' window.
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_RECV, 0).offset, 7398912u);
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_RECV, 0).size, 58720256u);
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_SIGNAL, 0).offset, 7398912u + 58720256u);
  // A slot spans 7398400 + 256 + 58720256 + 256 = 66119168 bytes.
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV, 1).offset, 256u + 66119168u);
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_SIGNAL, 1).offset, 66119168u + 66119168u);
  // End 132238592, rounded up to 4096: 32285 * 4096.
  EXPECT_EQ(p.symmetric_bytes, 132239360u);
  // Entry j of source s's token t sits at ((s * T + t) * 8 + j) rows into the slot.
  EXPECT_EQ(epc::kernels::ll_entry_row_offset(3, 127, 7, 128, 8, 14336), 58720256u - 14336u);
  EXPECT_EQ(epc::kernels::ll_entry_row_offset(1, 2, 3, 128, 8, 14336), ((1u * 128u + 2u) * 8u + 3u) * 14336u);
  // max_topk 2: a quarter of that region.
  c.max_topk = 2;
  EXPECT_EQ(epc::make_plan(c, {4, 4, 1}).region(EPC_REGION_COMBINE_RECV, 0).size, 4u * 128u * 2u * 14336u);
}

// EPC_GROUP_COMBINE_PER_ENTRY on a low-latency group across nodes (virtual ones here): the
// combine row each rank stages for a rank of another node is its [T][max_entries] entry
// rows, staged whole (core/staging_plan.cpp). RanksOutsideTheNodeGetStagingBlocks's shape
// (4 ranks, L = 16, hidden 1024, T 64, top-4), by hand, against the same group without the
// flag.
TEST(Planner, LowLatencyPerEntryAcrossNodesByHand) {
  auto c = group_config(EPC_MODE_LOW_LATENCY, 64, 1024, 64, 4);
  c.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  // One node: control 256, then per slot dispatch_recv 64 * 4 messages of 2112 B and 256 B
  // of counts (540928), its signals (256), combine_recv 4 * 64 * 4 rows of 2048 B (2097152,
  // four times the partials' 524288) and its signals (256): 256 + 2 * 2638592 = 5277440.
  const epc::Plan flat = epc::make_plan(c, {4, 4, 1});
  EXPECT_EQ(flat.region(EPC_REGION_COMBINE_RECV, 1).size, 2097152u);
  EXPECT_EQ(flat.symmetric_bytes, 5279744u);  // 5277440 rounded up to 4096
  // A rank block: the barrier word (16), then per slot the headers (4096), counts (64),
  // signal row (16), the 64 * 4 entry rows of 2048 B (524288, not 131072) and the signal
  // row (16): 16 + 2 * 528480 = 1056976. The payloads staged once: 2 * 64 * 2048 = 262144.
  const uint64_t block = 1056976, shared = 262144;
  // {node size, window with the flag, window without}: nodes of 1: 3 remote ranks, staging
  // 3433072 -> 3433216, window 5277440 + 3433216 = 8710656 -> 8712192; without the flag
  // 2131712 + 1073920 = 3205632 -> 3207168. Nodes of 2: staging 2376096 -> 2376192, window
  // 7653632 -> 7655424; without 2131712 + 803328 = 2935040 -> 2936832.
  const uint64_t cases[][3] = {{1, 8712192, 3207168}, {2, 7655424, 2936832}};
  for (const auto& [node_size, with_flag, without_flag] : cases) {
    SCOPED_TRACE(testing::Message() << "virtual nodes of " << node_size);
    c.virtual_node_size = static_cast<uint32_t>(node_size);
    c.flags = EPC_GROUP_COMBINE_PER_ENTRY;
    const epc::Plan plan = epc::make_plan(c, {4, 4, 1});
    const uint64_t remote = 4 - node_size;
    EXPECT_EQ(plan.staging_map.rank_block_bytes, block);
    EXPECT_EQ(plan.staging_map.shared_block_bytes, shared);
    const epc::kernels::StagedArray* rows = plan.staging_map.array(epc::kernels::Staged::kLlCombineRows, 1);
    ASSERT_NE(rows, nullptr);
    EXPECT_EQ(rows->row_bytes, 524288u);
    EXPECT_EQ(rows->row_stride, 524288u);
    EXPECT_EQ(plan.region(EPC_REGION_NET_STAGING).size, (remote * block + shared + 255) / 256 * 256);
    EXPECT_EQ(plan.symmetric_bytes, with_flag);
    c.flags = 0;
    const epc::Plan partials = epc::make_plan(c, {4, 4, 1});
    EXPECT_EQ(partials.symmetric_bytes, without_flag);
    // The difference: per slot, three more partial windows (1572864) in combine_recv and
    // three more partial rows (393216) per remote rank in staging, with no rounding left.
    EXPECT_EQ(with_flag - without_flag, 2 * 1572864 + 2 * remote * 393216);
  }
}

TEST(Planner, HighThroughputPrefillLayoutByHand) {
  // 4 ranks, 256 experts (64 local), hidden 7168, 4096 tokens, top-8.
  auto c = group_config(EPC_MODE_HIGH_THROUGHPUT, 256, 7168, 4096, 8);
  epc::Plan p = epc::make_plan(c, {4, 4, 1});
  // Row 14336 + scales 56 * 4 = 224 + top-k ids 8 * 4 = 32 + weights 8 * 4 = 32.
  EXPECT_EQ(p.message_bytes, 14624u);
  EXPECT_EQ(p.num_slots, 1u);
  ASSERT_EQ(p.regions.size(), 7u);
  // layout[s]: 2 * 4 signals * 8 = 64, then 4 * (2 + 64 + 1 + 4) words * 4 = 1136, then round
  // two's 4 * 64 words * 4 = 1024: 2224 -> 2304.
  EXPECT_EQ(p.region(EPC_REGION_LAYOUT, 0).offset, 256u);
  EXPECT_EQ(p.region(EPC_REGION_LAYOUT, 1).offset, 2560u);
  EXPECT_EQ(p.region(EPC_REGION_LAYOUT, 1).size, 2304u);
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV).offset, 4864u);
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV).size, 239599616u);  // 4 * 4096 * 14624
  // Chunk flags 4 * (4096 / 2) * 8 = 65536 + acks 4 * 8 = 65568 -> 65792.
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_SIGNAL).size, 65792u);
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_RECV).offset, 239670272u);
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_RECV).size, 235405312u);  // 4 * 4096 * (14336 + 32)
  // End 475141376 -> 116002 * 4096.
  EXPECT_EQ(p.symmetric_bytes, 475144192u);
  EXPECT_EQ(p.num_sms, 24u);

  // A receive capacity of a quarter of R * T: 4096 compact dispatch slots, 3 * 4096 * 14624
  // = 179699712 bytes fewer; the rest as above.
  c.recv_capacity = 4096;
  epc::Plan q = epc::make_plan(c, {4, 4, 1});
  EXPECT_EQ(q.recv_capacity, 4096u);
  EXPECT_EQ(q.region(EPC_REGION_DISPATCH_RECV).size, 59899904u);  // 4096 * 14624
  EXPECT_EQ(q.region(EPC_REGION_COMBINE_RECV).size, 235405312u);
  EXPECT_EQ(q.symmetric_bytes, 475144192u - 179699712u);
}

// 8 ranks in 2 nodes of 4 (real, then virtual), the same shape (L = 32): the window of R * T
// and, since 2.1, of a quarter of it, across nodes as on one node, with whole steps
// (EPCOMM_HT_PART_TOKENS=0; HighThroughputPartsAcrossNodesByHand has the default's parts).
TEST(Planner, HighThroughputCapacityAcrossNodesByHand) {
  const epc::test::ScopedEnv whole_steps("EPCOMM_HT_PART_TOKENS", "0");
  auto c = group_config(EPC_MODE_HIGH_THROUGHPUT, 256, 7168, 4096, 8);
  // control 8 * 8 -> 256; layout[s]: 2 * 8 signals * 8 = 128, 8 * (2 + 32 + 1 + 8) words * 4
  // = 1376, round two's 8 * 32 words * 4 = 1024: 2528 -> 2560, twice: 5376.
  // dispatch_recv 8 * 4096 * 14624 = 479199232; dispatch_signal 8 * 2048 flags * 8 + 8 acks
  // * 8 = 131136 -> 131328; combine_recv 8 * 4096 * 14368 = 470810624; combine_signal 131328;
  // rail_recv 2 nodes * 4096 * (14624 + 16 for 4 rows + 32 for 8 entry places) = 120193024;
  // rail_signal 2 * 2048 * 8
  // = 32768. net_staging: per rank of the other node (4) the barrier 16, per layout slot
  // signals 16 + 16, words 43 * 4 = 172 -> 176 and 32 * 4 = 128, the acks 16 + 16: 720; per
  // other node (1) its rail peer's rail slots 4096 * 14672 = 60096512, their flags 16384,
  // partials 4096 * 14368 = 58851328, their flags 16384: 118980608. 4 * 720 + 118980608 =
  // 118983488 -> 118983680. End 1189487360 -> 290403 * 4096 = 1189490688.
  const uint64_t full_window = 1189490688u, full_dispatch = 479199232u;
  // A quarter: 8192 compact slots of 14624 B, 119799808; 359399424 bytes fewer (a multiple
  // of 4096, so the rounded end falls by as much).
  const uint64_t quarter_dispatch = 119799808u, saved = 359399424u;
  // The handle: int32 topk_idx 4096 * 8, token_row 4096 * 8, chunk_start 2049 * 8, entry
  // counts 256, recv_count 8, recv_base 9, send_slot, recv_slot, source_tokens 8 each, expert
  // counts 32, forwarded_rows 2 * 4096 * 4, forwarded_topk 2 * 4096 * 8, forward_slot 2 * 4:
  // 180569 * 4 = 722276, and the 16-byte overflow state: 722292, whatever the capacity.
  const uint64_t handle = 722292u;
  for (uint32_t virtual_node_size : {0u, 4u}) {
    c.virtual_node_size = virtual_node_size;
    const epc::Topology t = virtual_node_size == 0 ? epc::Topology{8, 4, 2} : epc::Topology{8, 8, 1};
    c.recv_capacity = 0;
    const epc::Plan full = epc::make_plan(c, t);
    ASSERT_EQ(full.regions.size(), 10u) << virtual_node_size;
    EXPECT_EQ(full.region(EPC_REGION_DISPATCH_RECV).offset, 5376u);
    EXPECT_EQ(full.region(EPC_REGION_DISPATCH_RECV).size, full_dispatch);
    EXPECT_EQ(full.region(EPC_REGION_COMBINE_RECV).size, 470810624u);
    EXPECT_EQ(full.region(EPC_REGION_RAIL_RECV).size, 120193024u);
    EXPECT_EQ(full.region(EPC_REGION_NET_STAGING).size, 118983680u);
    EXPECT_EQ(full.symmetric_bytes, full_window);
    EXPECT_EQ(full.handle_bytes, handle);
    c.recv_capacity = 8192;
    const epc::Plan quarter = epc::make_plan(c, t);
    EXPECT_EQ(quarter.recv_capacity, 8192u);
    EXPECT_EQ(quarter.region(EPC_REGION_DISPATCH_RECV).size, quarter_dispatch);
    EXPECT_EQ(full_dispatch - quarter_dispatch, saved);
    EXPECT_EQ(quarter.symmetric_bytes, full_window - saved);  // 830091264
    EXPECT_EQ(quarter.symmetric_bytes, 830091264u);
    // Every other region keeps its size, and the staging map is the one of R * T.
    for (size_t r = 0; r < full.regions.size(); ++r) {
      if (full.regions[r].kind == EPC_REGION_DISPATCH_RECV) continue;
      EXPECT_EQ(quarter.regions[r].size, full.regions[r].size) << full.regions[r].name;
    }
    EXPECT_EQ(quarter.staging_map.rank_block_bytes, full.staging_map.rank_block_bytes);
    EXPECT_EQ(quarter.staging_map.rail_block_bytes, full.staging_map.rail_block_bytes);
    EXPECT_EQ(quarter.handle_bytes, handle);
  }
}

// The same 8 ranks in 2 nodes of 4 with steps in parts of 512 tokens per rank
// (EPCOMM_HT_PART_TOKENS=512, core/ht/ht_parts.hpp): the window holds one part. dispatch_recv 8 *
// 512 * 14624 = 59899904; dispatch_signal 8 * 256 chunk flags * 8 + 8 acks * 8 = 16448 ->
// 16640; combine_recv 8 * 512 * 14368 = 58851328; rail_recv 2 * 512 * 14672 = 15024128;
// rail_signal 2 * 256 * 8 = 4096. net_staging: 4 * 720 for the other node's ranks (as with
// whole steps), and for the other node 512 * 14672 rail slots, 256 * 8 of their flags, 512 *
// 14368 partials, 256 * 8 of theirs: 14872576; 14875456 -> 14875648. A quarter of R * T
// (recv_capacity 8192) keeps whole steps: the caller sized a compact window.
TEST(Planner, HighThroughputPartsAcrossNodesByHand) {
  const epc::test::ScopedEnv parts("EPCOMM_HT_PART_TOKENS", "512");
  auto c = group_config(EPC_MODE_HIGH_THROUGHPUT, 256, 7168, 4096, 8);
  for (uint32_t virtual_node_size : {0u, 4u}) {
    c.virtual_node_size = virtual_node_size;
    const epc::Topology t = virtual_node_size == 0 ? epc::Topology{8, 4, 2} : epc::Topology{8, 8, 1};
    c.recv_capacity = 0;
    const epc::Plan p = epc::make_plan(c, t);
    EXPECT_EQ(p.ht_part_tokens, 512u);
    EXPECT_EQ(p.recv_capacity, 8u * 4096u);  // the handles' rows: the whole step's
    EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV).offset, 5376u);
    EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV).size, 59899904u);
    EXPECT_EQ(p.region(EPC_REGION_DISPATCH_SIGNAL).size, 16640u);
    EXPECT_EQ(p.region(EPC_REGION_COMBINE_RECV).size, 58851328u);
    EXPECT_EQ(p.region(EPC_REGION_COMBINE_SIGNAL).size, 16640u);
    EXPECT_EQ(p.region(EPC_REGION_RAIL_RECV).size, 15024128u);
    EXPECT_EQ(p.region(EPC_REGION_RAIL_SIGNAL).size, 4096u);
    EXPECT_EQ(p.region(EPC_REGION_NET_STAGING).size, 14875648u);
    // 5376 + 59899904 + 16640 + 58851328 + 16640 + 15024128 + 4096 + 14875648 = 148693760
    // -> 36303 * 4096.
    EXPECT_EQ(p.symmetric_bytes, 148697088u);
    // The handle: the routing once (4096 * 8 int32), and per part (8) token_row 512 * 8,
    // chunk_start 257 * 8, entry counts 256, recv_count 8, recv_base 9, send_slot, recv_slot,
    // source_tokens 8 each, expert counts 32, forwarded_rows 2 * 512 * 4, forwarded_topk 2 *
    // 512 * 8, forward_slot 2 * 4: 18777 int32 and the 16-byte overflow state, 75124 bytes.
    EXPECT_EQ(p.handle_bytes, 4096u * 8u * 4u + 8u * 75124u);
    c.recv_capacity = 8192;
    const epc::Plan quarter = epc::make_plan(c, t);
    EXPECT_EQ(quarter.ht_part_tokens, 4096u);
    EXPECT_EQ(quarter.symmetric_bytes, 830091264u);  // as with whole steps
  }
  // A part of 1000 tokens: five parts, the last of 96; and parts never beyond the step.
  const epc::test::ScopedEnv thousand("EPCOMM_HT_PART_TOKENS", "1000");
  c.virtual_node_size = 0;
  c.recv_capacity = 0;
  EXPECT_EQ(epc::make_plan(c, {8, 4, 2}).ht_part_tokens, 1000u);
  EXPECT_EQ(epc::ht_parts(c, 1000), 5u);
  c.max_tokens_per_rank = 600;
  EXPECT_EQ(epc::make_plan(c, {8, 4, 2}).ht_part_tokens, 600u);
  EXPECT_EQ(epc::ht_parts(c, 600), 1u);
  // One node, and low latency, never run in parts.
  c.max_tokens_per_rank = 4096;
  EXPECT_EQ(epc::make_plan(c, {8, 8, 1}).ht_part_tokens, 4096u);
  EXPECT_EQ(epc::make_plan(group_config(EPC_MODE_LOW_LATENCY, 256, 7168, 128, 8), {8, 4, 2}).ht_part_tokens, 0u);
}

// By default the part is the largest multiple of 32 tokens whose window fits kHtWindowBudget
// (688 MiB), and steps run whole where the whole step's window fits it: 8 ranks in 2 nodes of
// 4, hidden 7168, plan 1134 MiB for whole steps of 4096 tokens, and fit at 1024 tokens.
TEST(Planner, PartsFitTheWindowBudget) {
  const epc::test::ScopedEnv unset("EPCOMM_HT_PART_TOKENS", "");
  auto c = group_config(EPC_MODE_HIGH_THROUGHPUT, 256, 7168, 4096, 8);
  const epc::Plan p = epc::make_plan(c, {8, 4, 2});
  EXPECT_LT(p.ht_part_tokens, 4096u);
  EXPECT_EQ(p.ht_part_tokens % epc::kHtPartGranule, 0u);
  EXPECT_LE(p.symmetric_bytes, epc::kHtWindowBudget);
  // One granule more would not fit.
  const std::string more = std::to_string(p.ht_part_tokens + epc::kHtPartGranule);
  {
    const epc::test::ScopedEnv forced("EPCOMM_HT_PART_TOKENS", more.c_str());
    EXPECT_GT(epc::make_plan(c, {8, 4, 2}).symmetric_bytes, epc::kHtWindowBudget);
  }
  // Four times the tokens: the same part, the same window.
  c.max_tokens_per_rank = 16384;
  EXPECT_EQ(epc::make_plan(c, {8, 4, 2}).ht_part_tokens, p.ht_part_tokens);
  EXPECT_EQ(epc::make_plan(c, {8, 4, 2}).symmetric_bytes, p.symmetric_bytes);
  // A step whose window fits runs whole.
  c.max_tokens_per_rank = 1024;
  const epc::Plan whole = epc::make_plan(c, {8, 4, 2});
  EXPECT_EQ(whole.ht_part_tokens, 1024u);
  EXPECT_LE(whole.symmetric_bytes, epc::kHtWindowBudget);
}

// A value of EPCOMM_HT_PART_TOKENS that is not a count in range names the variable.
TEST(Planner, PartTokensFromTheEnvironment) {
  auto c = group_config(EPC_MODE_HIGH_THROUGHPUT, 256, 7168, 4096, 8);
  for (const char* bad : {"-1", "abc", "65537", "12x"}) {
    const epc::test::ScopedEnv env("EPCOMM_HT_PART_TOKENS", bad);
    try {
      (void)epc::make_plan(c, {8, 4, 2});
      ADD_FAILURE() << bad;
    } catch (const epc::Error& e) {
      EXPECT_EQ(e.status(), EPC_ERR_INVALID_ARGUMENT) << bad;
      EXPECT_NE(std::string(e.what()).find("EPCOMM_HT_PART_TOKENS"), std::string::npos) << e.what();
    }
  }
}

// EPC_GROUP_COMBINE_PER_ENTRY: the combine window holds a slot per (token, top-k entry) of
// every source, [R][T * max_topk], for EPC_WEIGHTING_HOME; the rest of the layout is the one
// above. Served on high-throughput groups of one node or several.
TEST(Planner, PerEntryCombineWindowHoldsASlotPerEntry) {
  EpcGroupConfig raw = EPC_GROUP_CONFIG_INIT;
  raw.mode = EPC_MODE_HIGH_THROUGHPUT;
  raw.num_experts = 256;
  raw.hidden = 7168;
  raw.max_tokens_per_rank = 4096;
  raw.max_topk = 8;
  raw.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  const epc::GroupConfig c = epc::resolve_config(&raw);
  EXPECT_EQ(c.combine_slots_per_token(), 8u);
  epc::Plan p = epc::make_plan(c, {4, 4, 1});
  // Up to the combine window, as HighThroughputPrefillLayoutByHand.
  EXPECT_EQ(p.region(EPC_REGION_DISPATCH_RECV).size, 239599616u);
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_RECV).offset, 239670272u);
  // 4 * 4096 * 8 slots of 14336 + 32 bytes = 1883242496 (eight times the per-rank window).
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_RECV).size, 1883242496u);
  // The signals keep one flag per chunk of tokens: 65792 as before.
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_SIGNAL).offset, 239670272u + 1883242496u);
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_SIGNAL).size, 65792u);
  // 475144192 + 7 * 235405312 (already a multiple of 4096).
  EXPECT_EQ(p.symmetric_bytes, 2122981376u);
  // max_topk 2: a quarter of that window.
  raw.max_topk = 2;
  EXPECT_EQ(epc::make_plan(epc::resolve_config(&raw), {4, 4, 1}).region(EPC_REGION_COMBINE_RECV).size,
            4u * 4096u * 2u * (14336u + 16u));
  // Across nodes, virtual ones included, in parts of 512 tokens: the window of a part (a
  // slot per entry: 4 * 512 * 8 * 14368 = 235405312), and each rank stages the entry rows it
  // forwards to its rail peer in the other node, 512 * 8 slots of 14368 bytes (58851328),
  // beside its 512 partials (kHtCombineEntries, core/staging_plan.cpp).
  const epc::test::ScopedEnv parts("EPCOMM_HT_PART_TOKENS", "512");
  raw.max_topk = 8;
  raw.virtual_node_size = 2;
  const epc::Plan split = epc::make_plan(epc::resolve_config(&raw), {4, 4, 1});
  EXPECT_EQ(split.ht_part_tokens, 512u);
  EXPECT_EQ(split.region(EPC_REGION_COMBINE_RECV).size, 235405312u);
  ASSERT_NE(split.staging_map.array(epc::kernels::Staged::kHtCombineEntries, epc::kernels::kNoStagingSlot), nullptr);
  raw.flags = 0;
  const epc::Plan split_per_rank = epc::make_plan(epc::resolve_config(&raw), {4, 4, 1});
  EXPECT_EQ(split_per_rank.staging_map.array(epc::kernels::Staged::kHtCombineEntries, epc::kernels::kNoStagingSlot),
            nullptr);
  EXPECT_EQ(split.region(EPC_REGION_NET_STAGING).size - split_per_rank.region(EPC_REGION_NET_STAGING).size, 58851328u);
}

TEST(Planner, Fp8GroupsUseSmallerMessages) {
  EpcGroupConfig raw = EPC_GROUP_CONFIG_INIT;
  raw.num_experts = 256;
  raw.hidden = 7168;
  raw.max_token_bytes = 7168 + 7168 / 32;  // the fp8-only window
  epc::Plan p = epc::make_plan(epc::resolve_config(&raw), {4, 4, 1});
  // 112-byte header + 7168 fp8 bytes + 56 scales * 4 bytes.
  EXPECT_EQ(p.message_bytes, 112u + 7168u + 224u);
  // Combine rows stay bf16: 4 * 128 * 14336, and 4 * 16 line records of 2 * 14336.
  EXPECT_EQ(p.region(EPC_REGION_COMBINE_RECV, 0).size, 7340032u + 1835008u);
  // Any size from H + H/32 up to 2H - 1 is rounded down to that window.
  raw.max_token_bytes = 2 * 7168 - 1;
  EXPECT_EQ(epc::make_plan(epc::resolve_config(&raw), {4, 4, 1}).message_bytes, 112u + 7168u + 224u);
}

TEST(Planner, Fp8MessagesStartSixteenByteAligned) {
  // Found by the planner fuzz target (tests/fuzz/corpus/planner/ll-fp8-hidden-128 and -1152):
  // an fp8 row and its scales take hidden + hidden / 32 bytes, a multiple of 16 only when
  // hidden is a multiple of 512, but receivers read every message's payload in 16-byte
  // vectors. 112-byte header + 128 fp8 bytes + 1 scale = 244 bytes, padded to 256.
  EpcGroupConfig raw = EPC_GROUP_CONFIG_INIT;
  raw.num_experts = 64;
  raw.hidden = 128;
  raw.max_token_bytes = 128 + 128 / 32;  // the fp8-only window
  epc::Plan p = epc::make_plan(epc::resolve_config(&raw), {2, 2, 1});
  EXPECT_EQ(p.message_bytes, 256u);
  for (uint32_t hidden : {128u, 384u, 640u, 1152u, 2048u, 2944u, 7168u}) {
    raw.hidden = hidden;
    raw.max_token_bytes = hidden + hidden / 32;
    const epc::GroupConfig c = epc::resolve_config(&raw);
    const uint32_t bytes = epc::make_plan(c, {4, 4, 1}).message_bytes;
    EXPECT_EQ(bytes % 16, 0u) << "hidden " << hidden;
    EXPECT_GE(bytes, epc::ll_message_header_bytes(c) + hidden + hidden / 128 * 4) << "hidden " << hidden;
    EXPECT_LT(bytes, epc::ll_message_header_bytes(c) + hidden + hidden / 128 * 4 + 16) << "hidden " << hidden;
  }
}

TEST(Planner, HeaderHoldsEveryTopkEntry) {
  // 8 experts on 4 ranks (2 local), top-8: with duplicate ids all 8 entries can land on one
  // rank, so the header holds 8 entries: 8 + 8 * 12 = 104 -> 112 bytes.
  auto c = group_config(EPC_MODE_LOW_LATENCY, 8, 128, 16, 8);
  EXPECT_EQ(epc::ll_message_header_bytes(c), 112u);
  EXPECT_EQ(epc::make_plan(c, {4, 4, 1}).message_bytes, 112u + 256u);
}

TEST(Planner, RegionsAreAlignedOrderedAndDisjoint) {
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    for (int ranks : {1, 2, 3, 4, 8}) {
      auto c = group_config(mode, 48, 2880, 100, 16);
      epc::Plan p = epc::make_plan(c, {ranks, ranks, 1});
      uint64_t end = 0;
      for (const epc::Region& r : p.regions) {
        EXPECT_EQ(r.offset % epc::kRegionAlignment, 0u) << r.name;
        EXPECT_GE(r.offset, end) << r.name;
        EXPECT_GT(r.size, 0u) << r.name;
        end = r.offset + r.size;
      }
      EXPECT_GE(p.symmetric_bytes, end);
      EXPECT_EQ(p.symmetric_bytes % epc::kWindowAlignment, 0u);
    }
  }
}

// A one-node group holds, behind each dispatch slot's messages and count table, the line
// records of its largest line step (kernels::ll_dispatch_line_steps: at most kLlLineTokens
// tokens, and at most kLlLineGroupBytes of messages to a rank). A line group (max_tokens 8,
// 8 * 14448 bytes): behind the 4 * 8 messages of 14448 bytes (462336) and the count table
// (1024), 4 * 8 line records of twice a message (924672) and the table's 4 * 64 line words of
// 8 bytes (2048): 1390080 (a multiple of 256). Across nodes none (463360). EPCOMM_LL_LINE_TOKENS
// 4: steps of up to 4 tokens, 4 * 4 records (462336): 927744. max_tokens 10 (577920 + 1024 of
// messages and table) holds steps of up to 131072 / 14448 = 9 tokens (1040256 + 2048): 1621248.
// fp8 rows at max_tokens 16 make a line group (16 * 7504 bytes).
TEST(Planner, OneNodeGroupsHoldTheirLineStepsRecords) {
  auto c = group_config(EPC_MODE_LOW_LATENCY, 256, 7168, 8, 8);
  EXPECT_EQ(epc::make_plan(c, {4, 4, 1}).region(EPC_REGION_DISPATCH_RECV, 0).size, 1390080u);
  EXPECT_EQ(epc::make_plan(c, {4, 2, 2}).region(EPC_REGION_DISPATCH_RECV, 0).size, 463360u);
  {
    const epc::test::ScopedEnv fewer("EPCOMM_LL_LINE_TOKENS", "4");
    EXPECT_EQ(epc::make_plan(c, {4, 4, 1}).region(EPC_REGION_DISPATCH_RECV, 0).size, 927744u);
  }
  c.max_tokens_per_rank = 10;
  EXPECT_EQ(epc::make_plan(c, {4, 4, 1}).region(EPC_REGION_DISPATCH_RECV, 0).size, 1621248u);
  c.max_tokens_per_rank = 16;
  c.dtype = EPC_DTYPE_FP8_E4M3;
  const epc::Plan fp8 = epc::make_plan(c, {4, 4, 1});
  ASSERT_EQ(fp8.message_bytes, 7504u);
  EXPECT_EQ(fp8.region(EPC_REGION_DISPATCH_RECV, 0).size, 3u * 4 * 16 * 7504 + 1024 + 2048);
}

TEST(Planner, ScalesWithRanksAndTokens) {
  auto small = group_config(EPC_MODE_LOW_LATENCY, 64, 1024, 64, 4);
  auto large = group_config(EPC_MODE_LOW_LATENCY, 64, 1024, 128, 4);
  // Without line records, which scale with the largest line step instead
  // (OneNodeGroupsHoldTheirLineStepsRecords).
  const epc::test::ScopedEnv off("EPCOMM_LL_LINE_TOKENS", "0");
  uint64_t a = epc::make_plan(small, {2, 2, 1}).region(EPC_REGION_DISPATCH_RECV, 0).size;
  uint64_t b = epc::make_plan(large, {2, 2, 1}).region(EPC_REGION_DISPATCH_RECV, 0).size;
  uint64_t d = epc::make_plan(small, {4, 4, 1}).region(EPC_REGION_DISPATCH_RECV, 0).size;
  // Messages scale with ranks * tokens; the count table behind them is ranks * local experts
  // = 64 int32 = 256 bytes whatever the rank count.
  EXPECT_EQ(b - 256, 2 * (a - 256));
  EXPECT_EQ(d - 256, 2 * (a - 256));
}

TEST(Planner, NetworkResourcesOnlyAcrossNodes) {
  auto c = group_config(EPC_MODE_LOW_LATENCY, 64, 1024, 64, 4);
  epc::Plan one = epc::make_plan(c, {8, 8, 1});
  epc::Plan two = epc::make_plan(c, {8, 4, 2});
  EXPECT_EQ(one.gin_contexts, 0u);
  EXPECT_EQ(one.gin_signals, 0u);
  EXPECT_EQ(two.gin_contexts, 1u);
  // (barrier + slots * (dispatch, combine) * (step signal, credit)) * ranks of the other node
  // (words the own node writes travel over NVLink and need no GIN signal;
  // tests/unit/test_gin_signal_plan.cpp)
  EXPECT_EQ(two.gin_signals, (1u + 2u * 2u * 2u) * 4u);
}

// Every rank outside the node gets a staging block holding this rank's own row of each
// array it writes there (kernels/wire/staging_map.hpp), after every other region; virtual
// nodes split an LSA team without asking for GIN resources. tests/unit/test_staging_map.cpp
// checks the map against every kernel write.
TEST(Planner, RanksOutsideTheNodeGetStagingBlocks) {
  auto c = group_config(EPC_MODE_LOW_LATENCY, 64, 1024, 64, 4);
  const epc::Plan flat = epc::make_plan(c, {4, 4, 1});
  EXPECT_EQ(flat.staging_map.count, 0u);
  EXPECT_EQ(flat.regions.back().kind, EPC_REGION_COMBINE_SIGNAL);
  // Across nodes a combine has no line records (core/plan.hpp): the regions before the
  // staging are the one-node plan's without them.
  const epc::Plan lineless = [&] {
    const epc::test::ScopedEnv off("EPCOMM_LL_LINE_TOKENS", "0");
    return epc::make_plan(c, {4, 4, 1});
  }();
  EXPECT_EQ(lineless.ll_line_tokens, 0u);
  // A block, L = 16: the barrier word (8 -> 16), then per slot the headers of 64 messages of
  // 2112 B (header 8 + 4 * 12 = 56 -> 64, row 2048), 16 counts (64), the signal row (16), 64
  // partial rows of 2048 B and the signal row: 16 + 2 * (4096 + 64 + 16 + 131072 + 16) =
  // 270544. Behind the blocks the messages' payloads, staged once: 2 * 64 * 2048 = 262144.
  const uint64_t block = 270544, shared = 262144;
  for (uint32_t node_size : {1u, 2u}) {
    c.virtual_node_size = node_size;
    const epc::Plan plan = epc::make_plan(c, {4, 4, 1});
    const uint64_t remote = 4 - node_size;
    ASSERT_EQ(plan.regions.size(), flat.regions.size() + 1);
    const epc::Region& staging = plan.region(EPC_REGION_NET_STAGING);
    EXPECT_EQ(staging.name, "net_staging");
    EXPECT_EQ(plan.staging_map.offset, staging.offset);
    EXPECT_EQ(plan.staging_map.rank_block_bytes, block);
    EXPECT_EQ(plan.staging_map.rail_block_bytes, 0u);
    EXPECT_EQ(plan.staging_map.shared_block_bytes, shared);
    EXPECT_EQ(plan.ll_line_tokens, 0u);
    EXPECT_EQ(staging.offset, lineless.regions.back().offset + lineless.regions.back().size);
    EXPECT_EQ(staging.size, (remote * block + shared + 255) / 256 * 256);  // 1073920, 803328
    EXPECT_EQ(plan.gin_contexts, 0u);                                      // one LSA team: the stand-in carries it
  }
  c.virtual_node_size = 4;  // the whole team: no network at all
  EXPECT_EQ(epc::make_plan(c, {4, 4, 1}).staging_map.count, 0u);
  c.virtual_node_size = 0;
  // Two nodes of 4, L = 8: counts of 32 B, a block of 270480, 4 of them, and the payloads:
  // 1081920 + 262144 = 1344064 -> 1344256.
  const epc::Plan two_nodes = epc::make_plan(c, {8, 4, 2});
  EXPECT_EQ(two_nodes.region(EPC_REGION_NET_STAGING).size, 1344256u);
}

EpcStatus plan_status(const epc::GroupConfig& c, epc::Topology t) {
  try {
    epc::make_plan(c, t);
    return EPC_OK;
  } catch (const epc::Error& e) {
    return e.status();
  }
}

TEST(Planner, RejectsInconsistentTopology) {
  auto c = group_config(EPC_MODE_LOW_LATENCY, 64, 1024, 64, 4);
  EXPECT_EQ(plan_status(c, {0, 1, 1}), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(plan_status(c, {4, 3, 1}), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(plan_status(c, {4, 2, 1}), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(plan_status(c, {4, 8, 1}), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(plan_status(c, {4, 2, 2}), EPC_OK);
}

TEST(Planner, RejectsVirtualNodesThatDoNotDivideTheTeam) {
  auto c = group_config(EPC_MODE_HIGH_THROUGHPUT, 64, 1024, 64, 4);
  for (uint32_t bad : {3u, 5u, 8u}) {
    c.virtual_node_size = bad;
    EXPECT_EQ(plan_status(c, {4, 4, 1}), EPC_ERR_INVALID_ARGUMENT) << bad;
  }
  c.virtual_node_size = 2;
  EXPECT_EQ(plan_status(c, {8, 4, 2}), EPC_OK);
}

// No window past kMaxWindowBytes (2^52): staging of 16383 other nodes of 2^38 bytes each is
// refused before its size is summed; 1024 such nodes stage 2^48 bytes, but the window's
// receive regions and staging then need more than 2^52 bytes in all at 16384 ranks.
// With whole steps: steps in parts of 512 tokens plan 128 times less for these nodes.
TEST(Planner, RefusesWindowsBeyondAnyMemory) {
  const epc::test::ScopedEnv whole_steps("EPCOMM_HT_PART_TOKENS", "0");
  auto c = group_config(EPC_MODE_HIGH_THROUGHPUT, 65536, 1u << 20, 65536, 32);
  c.virtual_node_size = 1;
  EXPECT_EQ(plan_status(c, {16384, 16384, 1}), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(plan_status(c, {1024, 1024, 1}), EPC_OK);
  c.virtual_node_size = 0;
  EXPECT_EQ(plan_status(c, {16384, 16384, 1}), EPC_ERR_INVALID_ARGUMENT);
}

// A group whose launches would ask for more dynamic shared memory than a block may have is
// refused, naming the kernel: 8 bytes per rank in the LL combine and the HT layout, and in HT
// steps run in parts 8 bytes per local expert besides.
TEST(Planner, RefusesGroupsTheKernelsCouldNotLaunch) {
  const int most = static_cast<int>(epc::kernels::kDynamicSharedBudget / 8);
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    auto c = group_config(mode, static_cast<uint32_t>(most), 1024, 1, 1);
    EXPECT_EQ(plan_status(c, {most, most, 1}), EPC_OK) << mode;
    const int over = most + 8;
    c.num_experts = static_cast<uint32_t>(over);
    try {
      epc::make_plan(c, {over, over, 1});
      ADD_FAILURE() << "a group of " << over << " ranks was planned";
    } catch (const epc::Error& e) {
      EXPECT_EQ(e.status(), EPC_ERR_UNSUPPORTED);
      const std::string kernel = mode == EPC_MODE_LOW_LATENCY ? "in its combine kernel" : "in its layout kernel";
      EXPECT_NE(std::string(e.what()).find(std::to_string(over) + " ranks needs " + std::to_string(8 * over) +
                                           " bytes of shared memory per block " + kernel),
                std::string::npos)
          << e.what();
    }
  }
  // Two nodes of one rank, 32768 experts each: (2 + 2 * 32768 + 2) words in parts only.
  auto c = group_config(EPC_MODE_HIGH_THROUGHPUT, 65536, 1024, 4, 1);
  {
    const epc::test::ScopedEnv whole_steps("EPCOMM_HT_PART_TOKENS", "0");
    EXPECT_EQ(plan_status(c, {2, 1, 2}), EPC_OK);
  }
  const epc::test::ScopedEnv parts("EPCOMM_HT_PART_TOKENS", "2");
  EXPECT_EQ(plan_status(c, {2, 1, 2}), EPC_ERR_UNSUPPORTED);
}

TEST(Planner, RejectsExpertsNotDivisibleByRanks) {
  auto c = group_config(EPC_MODE_LOW_LATENCY, 64, 1024, 64, 4);
  EXPECT_EQ(plan_status(c, {3, 3, 1}), EPC_ERR_INVALID_ARGUMENT);
  auto c48 = group_config(EPC_MODE_LOW_LATENCY, 48, 1024, 64, 4);
  EXPECT_EQ(plan_status(c48, {3, 3, 1}), EPC_OK);
}

}  // namespace
