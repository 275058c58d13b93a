// SPDX-License-Identifier: Apache-2.0
// The staging map (core/staging_plan.cpp, kernels/wire/staging_map.hpp) against every write a
// kernel makes to a rank of another node. The writes are enumerated here from the same wire
// getters the kernels address them with (the kernel and line each mirrors is named), for
// every token, chunk and slot a routing could fill; then, for each writer:
//   - every written byte has a staged byte inside net_staging, and a write's bytes stay
//     contiguous there (the transport puts a write from one staged address);
//   - no staged byte holds two (peer, window byte) pairs, so data bytes and the words that
//     keep the last value signalled never share one; except the bytes staged once for every
//     rank of another node (low-latency payloads): each of those holds one source byte, the
//     same (slot, token, byte) for every peer it is put to, at one staged address;
//   - 16-byte writes at 16-byte-aligned window offsets are staged 16-byte aligned, and
//     signal words 8-byte aligned, each with a GIN signal id where the nodes are LSA teams;
//   - the region holds nothing else: the bytes no write reaches are at most the 16-byte
//     rounding of each staged row and record, and the region's rounding to 256 bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "core/planner.hpp"
#include "kernels/wire/ht_capacity.hpp"
#include "kernels/wire/ht_message.hpp"
#include "kernels/wire/ll_message.hpp"
#include "kernels/wire/staging_map.hpp"
#include "tests/unit/group_config.hpp"

namespace {

using epc::kernels::kNotStaged;
using epc::test::group_config;

struct Write {
  int peer;
  uint64_t offset;  // in the peer's window
  uint64_t bytes;
  bool signal = false;  // a signal word: its staged copy keeps the last value signalled
  // The bytes are the same for every peer (the writer's token payload): what is written is
  // named by the window offset alone, which names (slot, token, byte), whatever the peer.
  bool same_for_every_peer = false;
};

// Ranks outside `writer`'s node, and its rail peer in each other node.
std::vector<int> remote_ranks(const epc::Topology& t, int writer) {
  std::vector<int> out;
  for (int p = 0; p < t.nranks; ++p) {
    if (t.node_of(p) != t.node_of(writer)) out.push_back(p);
  }
  return out;
}
std::vector<int> rail_peers(const epc::Topology& t, int writer) {
  std::vector<int> out;
  for (int m = 0; m < t.nodes(); ++m) {
    if (m != t.node_of(writer)) out.push_back(m * t.node_size + writer % t.node_size);
  }
  return out;
}

// Low-latency: what `writer` commits and signals to each rank of another node.
std::vector<Write> ll_writes(const epc::GroupConfig& c, const epc::Topology& t, const epc::Plan& plan, int writer) {
  const int T = static_cast<int>(c.max_tokens_per_rank);
  const int L = static_cast<int>(c.local_experts(t.nranks));
  const uint64_t header = epc::ll_message_header_bytes(c);
  std::vector<Write> out;
  for (int p : remote_ranks(t, writer)) {
    // The barrier (kernels/transport/group_barrier.cu): its word of the inbox.
    out.push_back({p, plan.region(EPC_REGION_CONTROL).offset + static_cast<uint64_t>(writer) * 8, 8, true});
    for (uint32_t s = 0; s < plan.num_slots; ++s) {
      const uint64_t recv = plan.region(EPC_REGION_DISPATCH_RECV, s).offset;
      for (int t_ = 0; t_ < T; ++t_) {
        // ll_dispatch_send.cuh: each message's header to every rank, its payload (and fp8
        // scales, right behind the row) to ranks hosting an entry: the token's bytes, the
        // same for each of them.
        const uint64_t at = recv + epc::kernels::ll_record_offset(writer, t_, T, plan.message_bytes);
        out.push_back({p, at, header});
        out.push_back({p, at + header, c.payload_row_bytes(), false, true});
        // ll_combine_parts.cuh send (EPC_WEIGHTING_SENDER and NONE, with or without
        // EPC_GROUP_COMBINE_PER_ENTRY): the partial row for each token received from this
        // peer, at LlGeometry::partial_offset, whose record is combine_record_bytes long
        // (core/ll/ll_handle.cpp).
        const uint64_t combine = plan.region(EPC_REGION_COMBINE_RECV, s).offset;
        const uint64_t row = uint64_t{c.hidden} * 2;
        out.push_back(
            {p, combine + epc::kernels::ll_partial_offset(writer, t_, T, epc::ll_combine_record_bytes(c)), row});
        if ((c.flags & EPC_GROUP_COMBINE_PER_ENTRY) == 0) continue;
        // ll_combine_home.cuh send_entry_rows, with EPC_GROUP_COMBINE_PER_ENTRY: the token's
        // entry rows [writer][t][0, max_entries), stored through one buffer() of entry 0 (so
        // they must stay contiguous in staging: one write) and put per entry, or all at once.
        const int E = static_cast<int>(epc::ll_message_entries(c));
        out.push_back({p, combine + epc::kernels::ll_entry_row_offset(writer, t_, 0, T, E, row), row * E});
        for (int j = 0; j < E; ++j) {
          out.push_back({p, combine + epc::kernels::ll_entry_row_offset(writer, t_, j, T, E, row), row});
        }
      }
      // ll_dispatch_send.cuh send_count_tables: its row of the count table.
      const uint64_t table = recv + epc::kernels::ll_count_table_offset(t.nranks, T, plan.message_bytes);
      out.push_back({p, table + epc::kernels::ll_count_offset(writer, 0, L), static_cast<uint64_t>(L) * 4});
      // step_signal.cuh and ll_slot_credit.cuh: its step signal and credit in both directions.
      for (EpcRegionKind kind : {EPC_REGION_DISPATCH_SIGNAL, EPC_REGION_COMBINE_SIGNAL}) {
        const uint64_t region = plan.region(kind, s).offset;
        out.push_back({p, region + epc::kernels::ll_step_signal_offset(writer), 8, true});
        out.push_back({p, region + epc::kernels::ll_credit_offset(writer), 8, true});
      }
    }
  }
  return out;
}

// High-throughput: to every rank of another node the layout and the acknowledgements; to the
// rail peer in each other node the rail slots and flags, and combine's partials and flags.
std::vector<Write> ht_writes(const epc::GroupConfig& c, const epc::Topology& t, const epc::Plan& plan, int writer) {
  const int R = t.nranks, T = static_cast<int>(c.max_tokens_per_rank);
  const int L = static_cast<int>(c.local_experts(R));
  const int words = epc::kernels::ht_layout_words(R, L);
  const uint64_t acks = epc::ht_acks_offset(c, R);
  std::vector<Write> out;
  for (int p : remote_ranks(t, writer)) {
    out.push_back({p, plan.region(EPC_REGION_CONTROL).offset + static_cast<uint64_t>(writer) * 8, 8, true});
    for (uint32_t s = 0; s < epc::kHtLayoutSlots; ++s) {
      // ht_layout.cu: its words and signal; ht_layout_capacity.cuh: round two's.
      const uint64_t slot = plan.region(EPC_REGION_LAYOUT, s).offset;
      out.push_back({p, epc::kernels::ht_ack_word(slot, writer), 8, true});
      out.push_back({p, epc::kernels::ht_ack_word(slot + epc::ht_layout_round2_signals(R), writer), 8, true});
      out.push_back({p, slot + epc::ht_layout_words_offset(R) + static_cast<uint64_t>(writer) * words * 4,
                     static_cast<uint64_t>(words) * 4});
      out.push_back({p, slot + epc::ht_layout_round2_words_offset(R, L) + static_cast<uint64_t>(writer) * L * 4,
                     static_cast<uint64_t>(L) * 4});
    }
    // ht_step_kernel.cuh finish_ht_step: both directions' acknowledgements.
    for (EpcRegionKind kind : {EPC_REGION_DISPATCH_SIGNAL, EPC_REGION_COMBINE_SIGNAL}) {
      out.push_back({p, epc::kernels::ht_ack_word(plan.region(kind).offset + acks, writer), 8, true});
    }
  }
  const auto dispatch =
      epc::kernels::ht_dispatch_slot(c.hidden, c.dtype == EPC_DTYPE_FP8_E4M3 ? 1 : 2, c.max_topk, c.token_bytes);
  const auto rail = epc::kernels::ht_rail_slot(dispatch, static_cast<uint32_t>(t.node_size), c.max_topk);
  // The entries' places (EXPERT_PACKED) follow the rows per rank inside the slot put whole.
  const uint32_t places = epc::kernels::ht_rail_positions_offset(rail, static_cast<uint32_t>(t.node_size));
  EXPECT_GE(places, rail.rows_offset + 4 * static_cast<uint32_t>(t.node_size));
  EXPECT_LE(places + 4 * c.max_topk, rail.bytes);
  const auto combine = epc::kernels::ht_combine_slot(c.hidden, c.max_topk);
  const int own_node = t.node_of(writer);
  for (int p : rail_peers(t, writer)) {
    for (int t_ = 0; t_ < T; ++t_) {
      // ht_dispatch_rail.cuh: the rail slot [own node][t], put whole (its row per rank of
      // the node and, EXPERT_PACKED, its entries' places included); ht_combine_forward.cuh:
      // the partial [writer][t].
      out.push_back(
          {p, epc::kernels::ht_slot_offset(plan.region(EPC_REGION_RAIL_RECV).offset, own_node, t_, T, rail.bytes),
           rail.bytes});
      out.push_back(
          {p, epc::kernels::ht_slot_offset(plan.region(EPC_REGION_COMBINE_RECV).offset, writer, t_, T, combine.bytes),
           combine.bytes});
      // EPC_GROUP_COMBINE_PER_ENTRY, EPC_WEIGHTING_HOME: entry k's row [writer][t * max_topk + k].
      const int per_token = static_cast<int>(c.combine_slots_per_token());
      for (int k = 0; k < per_token && per_token > 1; ++k) {
        out.push_back({p,
                       epc::kernels::ht_slot_offset(plan.region(EPC_REGION_COMBINE_RECV).offset, writer,
                                                    t_ * per_token + k, T * per_token, combine.bytes),
                       combine.bytes});
      }
    }
    for (int chunk = 0; chunk < epc::kernels::ht_chunks(T); ++chunk) {
      out.push_back(
          {p, epc::kernels::ht_chunk_flag_word(plan.region(EPC_REGION_RAIL_SIGNAL).offset, own_node, chunk, T), 8});
      out.push_back(
          {p, epc::kernels::ht_chunk_flag_word(plan.region(EPC_REGION_COMBINE_SIGNAL).offset, writer, chunk, T), 8});
    }
  }
  return out;
}

// The checks of the file comment, for one writer.
void check_writer(const epc::GroupConfig& c, const epc::Topology& t, const epc::Plan& plan, int writer) {
  SCOPED_TRACE(testing::Message() << "writer " << writer << " of " << t.nranks << " ranks in nodes of " << t.node_size);
  const epc::kernels::StagingMap& map = plan.staging_map;
  const epc::Region& region = plan.region(EPC_REGION_NET_STAGING);
  const std::vector<Write> writes =
      c.mode == EPC_MODE_LOW_LATENCY ? ll_writes(c, t, plan, writer) : ht_writes(c, t, plan, writer);
  // owner[b]: the (peer, window byte) staged at byte b of the region, + 1 (0: none); for
  // bytes the same for every peer, the peer is nranks (one source for all).
  std::vector<uint64_t> owner(region.size, 0);
  // Where each byte the same for every peer is staged: one place for all of them.
  std::map<uint64_t, uint64_t> shared_at;
  uint64_t records = 0;
  for (const Write& w : writes) {
    ASSERT_GT(w.bytes, 0u);
    const uint64_t at = map.staged_offset(w.offset, writer, w.peer);
    ASSERT_NE(at, kNotStaged) << "peer " << w.peer << " offset " << w.offset;
    ASSERT_EQ(map.staged_offset(w.offset + w.bytes - 1, writer, w.peer), at + w.bytes - 1)
        << "peer " << w.peer << " offset " << w.offset << ": a write split in staging";
    ASSERT_GE(at, region.offset);
    ASSERT_LE(at + w.bytes, region.offset + region.size);
    if (w.offset % 16 == 0 && w.bytes % 16 == 0) {
      EXPECT_EQ(at % 16, 0u) << w.offset;
    }
    if (w.signal) {
      EXPECT_EQ(w.bytes, 8u);
      EXPECT_EQ(at % 8, 0u) << w.offset;
      // Between LSA teams the word also travels as a GIN signal of its own.
      if (plan.gin_signal_map.count > 0) {
        EXPECT_NE(plan.gin_signal_map.id(w.offset, t.node_of(w.peer)), epc::kernels::kNoGinSignal) << w.offset;
      }
    }
    if (w.same_for_every_peer) {
      const auto [it, first] = shared_at.emplace(w.offset, at);
      ASSERT_EQ(it->second, at) << "peer " << w.peer << " offset " << w.offset << ": staged twice";
      if (first) ++records;
    } else {
      ++records;
    }
    const uint64_t source = w.same_for_every_peer ? static_cast<uint64_t>(t.nranks) : static_cast<uint64_t>(w.peer);
    for (uint64_t i = 0; i < w.bytes; ++i) {
      const uint64_t key = source * plan.symmetric_bytes + w.offset + i + 1;
      uint64_t& slot = owner[at - region.offset + i];
      ASSERT_TRUE(slot == 0 || slot == key) << "staged byte " << at + i << " holds two bytes";
      slot = key;
    }
  }
  uint64_t unwritten = 0;
  for (uint64_t o : owner) unwritten += o == 0 ? 1 : 0;
  const uint64_t blocks = uint64_t{map.remote_ranks} + map.remote_nodes + 1;
  // EPC_GROUP_COMBINE_PER_ENTRY (HT): writer 0's partial row lies inside its entry row, so the
  // first T entry slots of its row are staged in its partial row (staging_map.hpp,
  // kHtCombineEntries), and their place in each rail block's entry row stays unused.
  uint64_t shadowed = 0;
  if (c.mode == EPC_MODE_HIGH_THROUGHPUT && c.combine_slots_per_token() > 1 && writer == 0) {
    shadowed =
        uint64_t{map.remote_nodes} * c.max_tokens_per_rank * epc::kernels::ht_combine_slot(c.hidden, c.max_topk).bytes;
  }
  EXPECT_LE(unwritten, shadowed + blocks * (map.count + map.part_count) * 15 + records * 15 + epc::kRegionAlignment - 1)
      << "net_staging holds " << unwritten << " bytes no kernel writes";
  EXPECT_GE(unwritten, shadowed);
}

void check_plan(const epc::GroupConfig& c, int nranks, int node_size, std::vector<int> writers = {}) {
  const epc::Topology lsa{nranks, node_size, nranks / node_size};
  const epc::Plan plan = epc::make_plan(c, lsa);
  const epc::Topology t = epc::with_virtual_nodes(lsa, c.virtual_node_size);
  if (writers.empty()) {
    for (int r = 0; r < nranks; ++r) writers.push_back(r);
  }
  for (int w : writers) check_writer(c, t, plan, w);
}

// Shapes small enough to enumerate every byte, in the node splits of the design study.
const int kSplits[][2] = {{4, 2}, {4, 1}, {6, 3}, {8, 4}, {16, 8}, {144, 72}};

TEST(StagingMap, EveryLowLatencyWriteIsStagedOnce) {
  for (EpcDtype dtype : {EPC_DTYPE_BF16, EPC_DTYPE_FP8_E4M3}) {
    for (uint32_t pending : {2u, 3u}) {
      for (const auto& split : kSplits) {
        auto c = group_config(EPC_MODE_LOW_LATENCY, 144, 256, 5, 4);
        c.dtype = dtype;
        c.max_pending_steps = pending;
        check_plan(c, split[0], split[1], split[0] > 16 ? std::vector<int>{0, 71, 72, 143} : std::vector<int>{});
      }
    }
  }
}

// EPC_GROUP_COMBINE_PER_ENTRY: the combine row is the writer's [T][max_entries] entry rows,
// which HOME writes and SENDER's partials (at entry row 0) too: at every split of the other
// tests, with 2 and 3 slots, and in virtual nodes of 1 and 2 (the GPU tests' splits).
TEST(StagingMap, EveryLowLatencyPerEntryWriteIsStagedOnce) {
  for (uint32_t pending : {2u, 3u}) {
    for (const auto& split : kSplits) {
      auto c = group_config(EPC_MODE_LOW_LATENCY, 144, 256, 5, 4);
      c.flags = EPC_GROUP_COMBINE_PER_ENTRY;
      c.max_pending_steps = pending;
      check_plan(c, split[0], split[1], split[0] > 16 ? std::vector<int>{0, 71, 72, 143} : std::vector<int>{});
    }
  }
  auto c = group_config(EPC_MODE_LOW_LATENCY, 16, 256, 6, 4);
  c.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  for (uint32_t node_size : {1u, 2u}) {
    c.virtual_node_size = node_size;
    check_plan(c, 4, 4);
  }
}

TEST(StagingMap, EveryHighThroughputWriteIsStagedOnce) {
  for (EpcDtype dtype : {EPC_DTYPE_BF16, EPC_DTYPE_FP8_E4M3}) {
    for (uint32_t flags : {0u, static_cast<uint32_t>(EPC_GROUP_COMBINE_PER_ENTRY)}) {
      for (const auto& split : kSplits) {
        auto c = group_config(EPC_MODE_HIGH_THROUGHPUT, 144, 256, 7, 4);
        c.dtype = dtype;
        c.flags = flags;
        check_plan(c, split[0], split[1], split[0] > 16 ? std::vector<int>{0, 71, 72, 143} : std::vector<int>{});
      }
    }
  }
}

// 256 ranks in nodes of 8, 32 nodes: the rail blocks and the rank blocks both in use.
TEST(StagingMap, ThirtyTwoNodes) {
  auto ll = group_config(EPC_MODE_LOW_LATENCY, 256, 128, 2, 2);
  check_plan(ll, 256, 8, {0, 7, 8, 130, 255});
  auto ht = group_config(EPC_MODE_HIGH_THROUGHPUT, 256, 128, 4, 2);
  check_plan(ht, 256, 8, {0, 7, 8, 130, 255});
}

// Virtual nodes inside one LSA team stage the same way (the stand-in puts from staging too).
TEST(StagingMap, VirtualNodes) {
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    auto c = group_config(mode, 16, 256, 6, 4);
    for (uint32_t node_size : {1u, 2u}) {
      c.virtual_node_size = node_size;
      check_plan(c, 4, 4);
    }
  }
}

// The named getters agree with the lookup: the writer's row of each array starts at its
// block plus the array's place, in rank blocks or rail blocks as the array says.
TEST(StagingMap, NamedGettersMatchTheLookup) {
  auto c = group_config(EPC_MODE_HIGH_THROUGHPUT, 64, 256, 8, 4);
  const epc::Plan plan = epc::make_plan(c, {16, 4, 4});
  const epc::kernels::StagingMap& map = plan.staging_map;
  ASSERT_EQ(map.count, 15u);
  const epc::kernels::StagedArray* rail = map.array(epc::kernels::Staged::kHtRailRows);
  ASSERT_NE(rail, nullptr);
  EXPECT_EQ(map.array(epc::kernels::Staged::kLlMessageHeaders, 0), nullptr);
  // Writer 5 (node 1, local index 1); its rail peer in node 3 is rank 13, the third other node.
  EXPECT_EQ(map.staged_offset(rail->writer_row(5, 1), 5, 13), map.rail_block(2) + rail->staged);
  EXPECT_EQ(map.rail_block(0), map.offset + 12 * map.rank_block_bytes);
  const epc::kernels::StagedArray* layout = map.array(epc::kernels::Staged::kHtLayoutWords, 1);
  ASSERT_NE(layout, nullptr);
  // Rank 14 is the tenth rank outside node 1 (0-3, then 8-15).
  EXPECT_EQ(map.staged_offset(layout->writer_row(5, 1) + 4, 5, 14), map.rank_block(10) + layout->staged + 4);
  // Another writer's row is not this writer's to stage.
  EXPECT_EQ(map.staged_offset(layout->writer_row(6, 1), 5, 14), kNotStaged);
}

// Low-latency messages: a token's header is staged per rank of another node, its payload
// once, at one address for all of them, in the shared block behind the rank blocks.
TEST(StagingMap, LowLatencyPayloadsAreStagedOnce) {
  using epc::kernels::Staged;
  using epc::kernels::StagedFor;
  const auto c = group_config(EPC_MODE_LOW_LATENCY, 64, 256, 8, 4);
  const epc::Plan plan = epc::make_plan(c, {16, 4, 4});
  const epc::kernels::StagingMap& map = plan.staging_map;
  ASSERT_EQ(map.count, 1u + 4u * plan.num_slots);
  ASSERT_EQ(map.part_count, 2u * plan.num_slots);
  const epc::kernels::StagedParts* headers = map.parts_of(Staged::kLlMessageHeaders, 1);
  const epc::kernels::StagedParts* payloads = map.parts_of(Staged::kLlMessagePayloads, 1);
  ASSERT_NE(headers, nullptr);
  ASSERT_NE(payloads, nullptr);
  EXPECT_EQ(map.array(Staged::kLlMessagePayloads, 1), &payloads->rows);
  EXPECT_EQ(headers->rows.staged_for, StagedFor::kEveryRemoteRank);
  EXPECT_EQ(payloads->rows.staged_for, StagedFor::kOnceForRemoteRanks);
  // Header 8 + 4 * 12 = 56 -> 64 bytes, payload 512: messages of 576 bytes, 8 per row.
  const uint64_t header = epc::ll_message_header_bytes(c);
  ASSERT_EQ(header, 64u);
  ASSERT_EQ(plan.message_bytes, 576u);
  EXPECT_EQ(headers->part_begin, 0u);
  EXPECT_EQ(headers->part_bytes, header);
  EXPECT_EQ(payloads->part_begin, header);
  EXPECT_EQ(payloads->part_bytes, 512u);
  EXPECT_EQ(map.shared_block_bytes, plan.num_slots * 8u * 512u);
  EXPECT_EQ(map.shared_block(), map.offset + 12 * map.rank_block_bytes);
  // Writer 5 (node 1), token 3, in slot 1 of any peer.
  const uint64_t message =
      plan.region(EPC_REGION_DISPATCH_RECV, 1).offset + epc::kernels::ll_record_offset(5, 3, 8, plan.message_bytes);
  for (int peer : {0, 3, 8, 14, 15}) {
    EXPECT_EQ(map.staged_offset(message + header + 16, 5, peer),
              map.shared_block() + payloads->rows.staged + 3 * 512 + 16)
        << peer;
  }
  // Its header bound for rank 14, the tenth rank outside node 1, and for rank 0, the first.
  EXPECT_EQ(map.staged_offset(message + 8, 5, 14), map.rank_block(10) + headers->rows.staged + 3 * header + 8);
  EXPECT_EQ(map.staged_offset(message + 8, 5, 0), map.rank_block(0) + headers->rows.staged + 3 * header + 8);
  // The message's last byte (no padding here), then the next message's header.
  EXPECT_EQ(map.staged_offset(message + plan.message_bytes - 1, 5, 0),
            map.shared_block() + payloads->rows.staged + 4 * 512 - 1);
  EXPECT_EQ(map.staged_offset(message + plan.message_bytes, 5, 0),
            map.rank_block(0) + headers->rows.staged + 4 * header);
}

// One node: no staging, and no map for the transport to read.
TEST(StagingMap, OneNodeHasNone) {
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    const epc::Plan plan = epc::make_plan(group_config(mode, 64, 256, 8, 4), {8, 8, 1});
    EXPECT_EQ(plan.staging_map.count, 0u);
    EXPECT_EQ(plan.staging_map.bytes(), 0u);
    for (const epc::Region& r : plan.regions) EXPECT_NE(r.kind, EPC_REGION_NET_STAGING);
  }
}

}  // namespace
