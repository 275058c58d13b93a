// SPDX-License-Identifier: Apache-2.0
// The named window offsets of kernels/wire/ (what kernels address) against the planner's
// regions (what group creation allocates), on the layouts test_planner.cpp works out by
// hand: every address a kernel computes lies inside the region the planner sized for it.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

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
  // A line group (line_tokens 8 >= max_tokens 8, 800 bytes of messages to a rank): the
  // dispatch's line records behind that table (3200 + 96), [4][8] of 200 bytes, then source 3's
  // count of local expert 1 as a line word: 3296 + 6400 + 2 * (3 * 6 + 1) * 4. Line tokens
  // below max_tokens make no line group, nor do messages of more than kLlLineGroupBytes; the
  // slot then holds the records of its largest line step ([4][4] with line tokens 4).
  EXPECT_TRUE(epc::kernels::ll_dispatch_line_group(8, 8, 100));
  EXPECT_FALSE(epc::kernels::ll_dispatch_line_group(4, 8, 100));
  EXPECT_FALSE(epc::kernels::ll_dispatch_line_group(0, 8, 100));
  EXPECT_TRUE(epc::kernels::ll_dispatch_line_group(8, 8, epc::kernels::kLlLineGroupBytes / 8));
  EXPECT_FALSE(epc::kernels::ll_dispatch_line_group(8, 8, epc::kernels::kLlLineGroupBytes / 8 + 16));
  EXPECT_EQ(epc::kernels::ll_dispatch_lines_offset(4, 8, 100, 6), 3296u);
  EXPECT_EQ(epc::kernels::ll_line_message_offset(2, 1, 8, 100), (2u * 8 + 1) * 200);
  EXPECT_EQ(epc::kernels::ll_line_count_offset(4, 8, 100, 3, 1, 6), 6400u + 2 * (3u * 6 + 1) * 4);
  EXPECT_EQ(epc::kernels::ll_dispatch_slot_bytes(4, 8, 100, 6, 8), 3296u + 6400u + 2 * 96u);
  EXPECT_EQ(epc::kernels::ll_dispatch_slot_bytes(4, 8, 100, 6, 4), 3296u + 3200u + 2 * 96u);
  // Line steps: line_tokens, fewer where their messages to a rank pass kLlLineGroupBytes.
  EXPECT_EQ(epc::kernels::ll_dispatch_line_steps(16, 100), 16);
  EXPECT_EQ(epc::kernels::ll_dispatch_line_steps(16, 14448), 9);
  EXPECT_EQ(epc::kernels::ll_dispatch_line_steps(16, 7504), 16);
  EXPECT_EQ(epc::kernels::ll_dispatch_line_steps(8, epc::kernels::kLlLineGroupBytes / 8 + 16), 7);
  EXPECT_EQ(epc::kernels::ll_dispatch_line_steps(16, epc::kernels::kLlLineGroupBytes + 16), 0);
  EXPECT_EQ(epc::kernels::ll_dispatch_line_steps(0, 100), 0);
  EXPECT_EQ(epc::kernels::ll_dispatch_slot_bytes(4, 8, 100, 6, 0), 3296u);
}

// A timed-out wait for step 6's records signal (epoch 7) that last read step 6's line signal
// (epoch 7 with the line bit) gave up on a peer that moved the step the other way, and so the
// other way round; an older epoch of either kind, or a wait for no step signal, did not.
TEST(WireOffsets, SignalOfTheOtherKindIsTheSameStepsOtherEpoch) {
  using epc::kernels::kLlLineEpochBit;
  using epc::kernels::ll_signal_of_other_kind;
  const uint64_t payload = 0x00030002u;
  EXPECT_TRUE(ll_signal_of_other_kind(uint64_t{7 | kLlLineEpochBit} << 32 | payload, 7));
  EXPECT_TRUE(ll_signal_of_other_kind(uint64_t{7} << 32 | payload, 7 | kLlLineEpochBit));
  EXPECT_FALSE(ll_signal_of_other_kind(uint64_t{5 | kLlLineEpochBit} << 32 | payload, 7));
  EXPECT_FALSE(ll_signal_of_other_kind(uint64_t{5} << 32 | payload, 7 | kLlLineEpochBit));
  EXPECT_FALSE(ll_signal_of_other_kind(uint64_t{5} << 32 | payload, 7));
  EXPECT_FALSE(ll_signal_of_other_kind(0, 7));
  EXPECT_FALSE(ll_signal_of_other_kind(uint64_t{kLlLineEpochBit} << 32, 0));
}

TEST(WireOffsets, LowLatencySlicesSplitItemsAndRowsByHand) {
  using epc::kernels::is_slice_count;
  using epc::kernels::slice_of;
  using epc::kernels::sliced_row;
  using epc::kernels::vector_slice;
  EXPECT_TRUE(is_slice_count(1));
  EXPECT_TRUE(is_slice_count(8));
  EXPECT_FALSE(is_slice_count(0));
  EXPECT_FALSE(is_slice_count(6));
  EXPECT_FALSE(is_slice_count(16));
  // Item 13 of a walk of 4 slices per row: row 3, slice 1.
  EXPECT_EQ(sliced_row(13, 4), 3);
  EXPECT_EQ(slice_of(13, 4), 1);
  EXPECT_EQ(sliced_row(13, 1), 13);
  EXPECT_EQ(slice_of(13, 1), 0);
  // 896 vectors (a hidden-7168 bf16 row) in 8 slices: 112 each; in 4 slices of whole warps
  // (granule 32): 28 granules, 7 per slice, 224 vectors; 100 vectors in 8 slices: 13 each,
  // the last 9, and in 8 slices of granule 32 (4 granules) the last four slices empty.
  EXPECT_EQ(vector_slice(896, 3, 8).begin, 336);
  EXPECT_EQ(vector_slice(896, 3, 8).end, 448);
  EXPECT_EQ(vector_slice(896, 1, 4, 32).begin, 224);
  EXPECT_EQ(vector_slice(896, 1, 4, 32).end, 448);
  EXPECT_EQ(vector_slice(100, 7, 8).begin, 91);
  EXPECT_EQ(vector_slice(100, 7, 8).end, 100);
  EXPECT_EQ(vector_slice(100, 3, 8, 32).begin, 96);
  EXPECT_EQ(vector_slice(100, 3, 8, 32).end, 100);
  EXPECT_EQ(vector_slice(100, 4, 8, 32).begin, 100);
  EXPECT_EQ(vector_slice(100, 4, 8, 32).end, 100);
  // Every slice count's slices cover each row once, in order.
  for (int slices = 1; slices <= epc::kernels::kLlMaxMessageSlices; slices *= 2) {
    for (int vectors : {1, 7, 100, 896, 1000}) {
      for (int granule : {1, 32}) {
        int next = 0;
        for (int slice = 0; slice < slices; ++slice) {
          const auto part = vector_slice(vectors, slice, slices, granule);
          EXPECT_EQ(part.begin, next) << slices << " slices of " << vectors << ", granule " << granule;
          EXPECT_LE(part.begin, part.end);
          next = part.end;
        }
        EXPECT_EQ(next, vectors) << slices << " slices of " << vectors << ", granule " << granule;
      }
    }
  }
}

TEST(WireOffsets, LowLatencyQuotientsByMultiply) {
  using epc::kernels::multiply_quotient;
  using epc::kernels::quotient_multiplier;
  // ceil(2^32 / d) by hand for d = 3 and 32; 0 for d = 1 and where limit * d passes 2^32.
  EXPECT_EQ(quotient_multiplier(3, 1000), 1431655766u);
  EXPECT_EQ(quotient_multiplier(32, 1000), 134217728u);
  EXPECT_EQ(quotient_multiplier(1, 1000), 0u);
  EXPECT_EQ(quotient_multiplier(1024, int64_t{1} << 22), 4194304u);
  EXPECT_EQ(quotient_multiplier(1024, (int64_t{1} << 22) + 1), 0u);
  EXPECT_EQ(multiply_quotient(1000, quotient_multiplier(3, 1000)), 333);
  // Every expert of groups up to kMaxExperts = 2^16 experts, for local expert counts of every
  // kind (1, powers of two, odd, the most); every slot of 1024 ranks of up to kMaxLlTokens
  // (4096 ranks of 1024 tokens: the multiplier is 0 and the slot's source a division).
  for (int local : {1, 2, 3, 7, 32, 96, 255, 256, 4097, 32768, 65536}) {
    epc::kernels::LlGeometry g{};
    g.local_experts = local;
    const int experts = (65536 / local) * local;
    g.expert_rank_multiplier = quotient_multiplier(local, experts);
    for (int e = 0; e < experts; ++e) {
      if (g.rank_of_expert(e) != e / local) {
        ADD_FAILURE() << "expert " << e << " of " << local << " per rank: " << g.rank_of_expert(e);
        break;
      }
    }
  }
  for (const auto& [ranks, tokens] :
       {std::pair{1024, 1}, std::pair{1024, 3}, std::pair{1024, 8}, std::pair{1024, 100}, std::pair{1024, 128},
        std::pair{1024, 1000}, std::pair{1024, epc::kernels::kMaxLlTokens},
        std::pair{4096, epc::kernels::kMaxLlTokens}}) {
    epc::kernels::LlGeometry g{};
    g.max_tokens = tokens;
    const int slots = ranks * tokens;
    g.slot_source_multiplier = quotient_multiplier(tokens, slots);
    EXPECT_EQ(g.slot_source_multiplier == 0, tokens == 1 || int64_t{slots} * tokens > (int64_t{1} << 32));
    for (int slot = 0; slot < slots; ++slot) {
      if (g.source_of_slot(slot) != slot / tokens) {
        ADD_FAILURE() << "slot " << slot << " of " << tokens << " per source: " << g.source_of_slot(slot);
        break;
      }
    }
  }
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
  g.dispatch_line_tokens = epc::kernels::ll_dispatch_line_steps(g.line_tokens, p.message_bytes);
  EXPECT_EQ(g.dispatch_line_tokens, 9);
  for (uint32_t s = 0; s < p.num_slots; ++s) {
    const epc::Region& recv = p.region(EPC_REGION_DISPATCH_RECV, s);
    // The last message ends where the count table starts; the table ends inside the region.
    EXPECT_EQ(g.message_offset(recv.offset, 3, 127) + g.message_bytes, g.count_table_offset(recv.offset));
    EXPECT_LE(g.count_table_offset(recv.offset) + epc::kernels::ll_count_table_bytes(4, 64), recv.offset + recv.size);
    // Behind the table (a multiple of 16 here), the [R][9] line records of the line steps and
    // the table's line words, the last ending in the region's last 256 bytes (its rounding).
    EXPECT_EQ(g.line_message_offset(recv.offset, 0, 0),
              g.count_table_offset(recv.offset) + epc::kernels::ll_count_table_bytes(4, 64));
    EXPECT_EQ(g.line_message_offset(recv.offset, 3, 8) + 2 * g.message_bytes, g.line_count_offset(recv.offset, 0, 0));
    EXPECT_LE(g.line_count_offset(recv.offset, 3, 63) + 8, recv.offset + recv.size);
    EXPECT_GT(g.line_count_offset(recv.offset, 3, 63) + 8, recv.offset + recv.size - 256);
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

// A line group (max_tokens 8, test_planner.cpp): behind the [R][8] messages and the count
// table, the [R][8] line records of twice a message and the table's line words, the last
// ending with the dispatch region.
TEST(WireOffsets, LineGroupDispatchLinesFitThePlannedRegion) {
  const auto c = group_config(EPC_MODE_LOW_LATENCY, 256, 7168, 8, 8);
  const epc::Plan p = epc::make_plan(c, {4, 4, 1});
  ASSERT_EQ(p.ll_line_tokens, 8u);
  epc::kernels::LlGeometry g{};
  g.nranks = 4;
  g.local_experts = 64;
  g.max_tokens = 8;
  g.message_bytes = static_cast<int>(p.message_bytes);
  g.line_tokens = 8;
  g.dispatch_line_tokens = epc::kernels::ll_dispatch_line_steps(g.line_tokens, p.message_bytes);
  ASSERT_EQ(g.dispatch_line_tokens, 8);
  for (uint32_t s = 0; s < p.num_slots; ++s) {
    const epc::Region& recv = p.region(EPC_REGION_DISPATCH_RECV, s);
    EXPECT_EQ(g.line_message_offset(recv.offset, 0, 0),
              g.count_table_offset(recv.offset) + epc::kernels::ll_count_table_bytes(4, 64));
    EXPECT_EQ(g.line_message_offset(recv.offset, 2, 5),
              g.line_message_offset(recv.offset, 0, 0) + (2u * 8 + 5) * 2 * g.message_bytes);
    EXPECT_EQ(g.line_message_offset(recv.offset, 3, 7) + 2 * g.message_bytes, g.line_count_offset(recv.offset, 0, 0));
    EXPECT_EQ(g.line_count_offset(recv.offset, 3, 63) + 8, recv.offset + recv.size);
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

// A chunk flag's epoch is what a reader waits for in a word the writer rewrites only in steps
// that have the chunk: it must never be 0, the value of a word no step wrote yet, and must
// tell apart every step within a period far beyond any run. Before, it was (step + 1) &
// (2^24 - 1): 0 at step 2^24 - 1 (16.7M dispatches of one group), where every chunk flag never
// written before (a batch larger than any before) matched at once and its rows were not copied.
TEST(WireOffsets, HighThroughputChunkFlagEpochIsNeverZero) {
  using namespace epc::kernels;
  for (const uint64_t step :
       {uint64_t{0}, uint64_t{1}, (uint64_t{1} << 24) - 1, uint64_t{1} << 24, kHtChunkEpochPeriod - 1,
        kHtChunkEpochPeriod, (uint64_t{1} << 32) - 1, (uint64_t{1} << 40) - 1, ~uint64_t{0}}) {
    SCOPED_TRACE(step);
    EXPECT_NE(ht_chunk_epoch(step), 0u);
    EXPECT_NE(ht_chunk_flag_epoch(ht_chunk_flag(step, 0, 0)), ht_chunk_flag_epoch(0));
    EXPECT_EQ(ht_chunk_flag_epoch(ht_chunk_flag(step, 65536, 65536)), ht_chunk_epoch(step));
    EXPECT_NE(ht_chunk_epoch(step + 1), ht_chunk_epoch(step));
  }
  // Consecutive steps differ, and an epoch repeats only after a whole period (2^29 steps).
  EXPECT_GE(kHtChunkEpochPeriod, uint64_t{1} << 29);
  for (uint64_t step = 0; step < 3 * kHtChunkEpochPeriod; step += kHtChunkEpochPeriod / 4 - 1) {
    EXPECT_NE(ht_chunk_epoch(step), ht_chunk_epoch(step + 1));
    EXPECT_NE(ht_chunk_epoch(step), ht_chunk_epoch(step + kHtChunkEpochPeriod - 1));
    EXPECT_EQ(ht_chunk_epoch(step), ht_chunk_epoch(step + kHtChunkEpochPeriod));
  }
  // Start and end round-trip up to kMaxHtTokens rows; a rail flag's start holds a token mask.
  for (const uint32_t rows : {0u, 1u, 4095u, static_cast<uint32_t>(kMaxHtTokens)}) {
    const uint64_t flag = ht_chunk_flag(12345, rows / 2, rows);
    EXPECT_EQ(ht_chunk_flag_start(flag), static_cast<int>(rows / 2));
    EXPECT_EQ(ht_chunk_flag_end(flag), static_cast<int>(rows));
    EXPECT_EQ(ht_chunk_flag_epoch(flag), ht_chunk_epoch(12345));
  }
  EXPECT_EQ(ht_chunk_flag_start(ht_chunk_flag(7, (1u << kHtChunkTokens) - 1, 0)), (1 << kHtChunkTokens) - 1);
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

// A low-latency step's epoch (signals and line words): never 0, the value of a word no step
// wrote yet (line records past the most tokens a source ever sent), with or without the line
// bit; step mod 2^30 + 1 exactly. It was step + 1 in 32 bits: 0 at step 2^32 - 1, and its line
// epoch 0 at step 2^31 - 1 (days of decode steps).
TEST(WireOffsets, LowLatencyStepEpochIsNeverZero) {
  using namespace epc::kernels;
  std::vector<uint64_t> steps = {0,
                                 1,
                                 kLlEpochPeriod - 2,
                                 kLlEpochPeriod - 1,
                                 kLlEpochPeriod,
                                 kLlEpochPeriod + 1,
                                 (uint64_t{1} << 31) - 1,
                                 uint64_t{1} << 31,
                                 (uint64_t{1} << 32) - 1,
                                 uint64_t{1} << 32,
                                 2 * kLlEpochPeriod,
                                 (uint64_t{1} << 62) - 1,
                                 uint64_t{1} << 62,
                                 ~uint64_t{0} - 1,
                                 ~uint64_t{0}};
  uint64_t x = 0x9E3779B97F4A7C15ull;  // and pseudo-random ones over all 64 bits
  for (int i = 0; i < 100000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    steps.push_back(x);
  }
  for (const uint64_t step : steps) {
    const uint32_t epoch = ll_step_epoch(step);
    ASSERT_EQ(epoch, static_cast<uint32_t>(step % kLlEpochPeriod) + 1) << step;
    ASSERT_EQ(ll_step_epoch(step + kLlEpochPeriod), epoch) << step;  // the period
    ASSERT_NE(epoch, 0u) << step;
    ASSERT_EQ(epoch & kLlLineEpochBit, 0u) << step;  // the line epoch differs, and is never 0
    ASSERT_NE(epoch ^ kLlLineEpochBit, 0u) << step;
    if (step != ~uint64_t{0}) {
      ASSERT_NE(ll_step_epoch(step + 1), epoch) << step;
    }
  }
}
