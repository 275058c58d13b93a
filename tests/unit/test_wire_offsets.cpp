// SPDX-License-Identifier: Apache-2.0
// The named window offsets of kernels/wire/ (what kernels address) against the planner's
// regions (what group creation allocates), on the layouts test_planner.cpp works out by
// hand: every address a kernel computes lies inside the region the planner sized for it.
#include <gtest/gtest.h>

#include "core/planner.hpp"
#include "kernels/wire/ht_message.hpp"
#include "kernels/wire/ll_params.hpp"
#include "tests/unit/group_config.hpp"

namespace {

using epc::test::group_config;

TEST(WireOffsets, LowLatencyRecordsByHand) {
  // Record (source 2, token 5) of [ranks][8 tokens] records of 100 bytes: (2 * 8 + 5) * 100.
  EXPECT_EQ(epc::kernels::ll_record_offset(2, 5, 8, 100), 2100u);
  // Behind 4 ranks x 8 tokens of 100-byte messages; source 3's count of local expert 1 of 6.
  EXPECT_EQ(epc::kernels::ll_count_table_offset(4, 8, 100), 3200u);
  EXPECT_EQ(epc::kernels::ll_count_offset(3, 1, 6), (3u * 6 + 1) * 4);
  EXPECT_EQ(epc::kernels::ll_count_table_bytes(4, 6), 96u);
}

TEST(WireOffsets, LowLatencyAddressesFitThePlannedRegions) {
  // 4 ranks, 256 experts (64 local), hidden 7168, 128 tokens, top-8 (test_planner.cpp).
  const auto c = group_config(EPC_MODE_LOW_LATENCY, 256, 7168, 128, 8);
  const epc::Plan p = epc::make_plan(c, {4, 4, 1});
  epc::kernels::LlGeometry g{};
  g.nranks = 4;
  g.local_experts = 64;
  g.max_tokens = 128;
  g.message_bytes = static_cast<int>(p.message_bytes);
  g.row_bytes = 7168 * 2;
  g.max_entries = 8;
  g.combine_record_bytes = static_cast<int>(epc::ll_combine_record_bytes(c));
  EXPECT_EQ(g.combine_record_bytes, g.row_bytes);
  g.line_tokens = static_cast<int>(p.ll_line_tokens);
  EXPECT_EQ(g.line_tokens, 16);
  for (uint32_t s = 0; s < p.num_slots; ++s) {
    const epc::Region& recv = p.region(EPC_REGION_DISPATCH_RECV, s);
    // The last message ends where the count table starts; the table ends inside the region.
    EXPECT_EQ(g.message_offset(recv.offset, 3, 127) + g.message_bytes, g.count_table_offset(recv.offset));
    EXPECT_LE(g.count_table_offset(recv.offset) + epc::kernels::ll_count_table_bytes(4, 64), recv.offset + recv.size);
    const epc::Region& partials = p.region(EPC_REGION_COMBINE_RECV, s);
    // The [R][T] partials of one row each, as in 2.0, then the [R][16] line records of two
    // rows each, the last ending with the region.
    EXPECT_EQ(g.partial_offset(partials.offset, 2, 5), partials.offset + (2u * 128 + 5) * 14336);
    EXPECT_EQ(g.partial_offset(partials.offset, 3, 127) + g.row_bytes, g.line_partial_offset(partials.offset, 0, 0));
    EXPECT_EQ(g.line_partial_offset(partials.offset, 2, 5),
              partials.offset + 4u * 128 * 14336 + (2u * 16 + 5) * 2 * 14336);
    EXPECT_EQ(g.line_partial_offset(partials.offset, 3, 15) + 2 * g.row_bytes, partials.offset + partials.size);
  }
}

// EPC_GROUP_COMBINE_PER_ENTRY: a combine record is max_entries rows; SENDER's partial of
// (source, token) is its entry row 0, where HOME's first entry goes, and the last of them
// ends one record before the slot's end (the last record's other 7 rows).
TEST(WireOffsets, LowLatencyPartialsOfPerEntryGroupsAreEntryRowZero) {
  auto c = group_config(EPC_MODE_LOW_LATENCY, 256, 7168, 128, 8);
  c.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  const epc::Plan p = epc::make_plan(c, {4, 4, 1});
  epc::kernels::LlGeometry g{};
  g.nranks = 4;
  g.max_tokens = 128;
  g.row_bytes = 7168 * 2;
  g.max_entries = 8;
  g.combine_record_bytes = static_cast<int>(epc::ll_combine_record_bytes(c));
  EXPECT_EQ(g.combine_record_bytes, 8 * 14336);
  for (uint32_t s = 0; s < p.num_slots; ++s) {
    const epc::Region& rows = p.region(EPC_REGION_COMBINE_RECV, s);
    for (int source : {0, 1, 3}) {
      for (int token : {0, 5, 127}) {
        EXPECT_EQ(g.partial_offset(rows.offset, source, token), g.entry_row_offset(rows.offset, source, token, 0));
      }
    }
    // (1, 2): record 130 of 8 rows of 14336 bytes.
    EXPECT_EQ(g.partial_offset(rows.offset, 1, 2), rows.offset + 130u * 8 * 14336);
    EXPECT_EQ(g.partial_offset(rows.offset, 3, 127) + 8u * 14336, rows.offset + rows.size);
  }
}

TEST(WireOffsets, HighThroughputSlotsAndFlagsByHand) {
  // Slot (stream 3, row 7) of [streams][4096] slots of 14624 bytes from offset 2816.
  EXPECT_EQ(epc::kernels::ht_slot_offset(2816, 3, 7, 4096, 14624), 2816u + (3u * 4096 + 7) * 14624);
  // Chunk flag 9 of stream 2, 4096 tokens in chunks of 2 (2048 per stream), from offset 64.
  EXPECT_EQ(epc::kernels::ht_chunk_flag_word(64, 2, 9, 4096), 64u + (2u * 2048 + 9) * 8);
  EXPECT_EQ(epc::kernels::ht_chunk_flags_bytes(4, 4096), 65536u);
  EXPECT_EQ(epc::kernels::ht_ack_word(100, 3), 124u);
}

TEST(WireOffsets, HighThroughputAddressesFitThePlannedRegions) {
  const auto c = group_config(EPC_MODE_HIGH_THROUGHPUT, 256, 7168, 4096, 8);
  const epc::Plan p = epc::make_plan(c, {4, 4, 1});
  const auto slot = epc::kernels::ht_dispatch_slot(7168, 2, 8);
  const epc::Region& recv = p.region(EPC_REGION_DISPATCH_RECV);
  EXPECT_EQ(epc::kernels::ht_slot_offset(recv.offset, 3, 4095, 4096, slot.bytes) + slot.bytes, recv.offset + recv.size);
  // The flags, then one acknowledgement per rank, fill the signal region's planned bytes.
  const epc::Region& signal = p.region(EPC_REGION_DISPATCH_SIGNAL);
  const uint64_t acks = signal.offset + epc::ht_acks_offset(c, 4);
  EXPECT_EQ(epc::kernels::ht_chunk_flag_word(signal.offset, 3, 2047, 4096) + 8, acks);
  EXPECT_EQ(epc::kernels::ht_ack_word(acks, 3) + 8, signal.offset + epc::ht_signal_bytes(c, 4));
  EXPECT_LE(signal.offset + epc::ht_signal_bytes(c, 4), signal.offset + signal.size);
}

}  // namespace
