// SPDX-License-Identifier: Apache-2.0
// The GIN signal ids of a plan (core/gin_signal_plan.cpp, kernels/wire/gin_signal_map.hpp):
// every window word a rank of another node signals, as the kernels address it, has an id;
// for each reader the ids are exactly [0, gin_signals), one per word; words written from
// inside the reader's node, and words that are not signals, have none.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/gin_signal_plan.hpp"
#include "core/planner.hpp"
#include "kernels/wire/gin_signal_map.hpp"
#include "kernels/wire/ht_message.hpp"
#include "kernels/wire/ll_message.hpp"

namespace {

using epc::kernels::kNoGinSignal;

epc::GroupConfig config(EpcMode mode, uint32_t experts, uint32_t tokens) {
  EpcGroupConfig raw = EPC_GROUP_CONFIG_INIT;
  raw.mode = mode;
  raw.num_experts = experts;
  raw.hidden = 1024;
  raw.max_tokens_per_rank = tokens;
  raw.max_topk = 4;
  return epc::resolve_config(&raw);
}

// A word a writer signals into a reader's window, as the kernels compute its offset.
struct SignalWord {
  uint64_t offset;
  int writer;
  // A word of a row outside the reader's node that a rank of its node writes (HT combine
  // rows returned to a rail peer): never read through GIN (the writer is in the node), and
  // the rail array's numbering gives it its node's id, unused for this reader.
  bool written_in_node_for_another_node = false;
};

// The group barrier's inbox (kernels/transport/group_barrier.cu): each writer's word, in both modes.
std::vector<SignalWord> barrier_words(const epc::Plan& p, int nranks) {
  std::vector<SignalWord> words;
  const uint64_t inbox = p.region(EPC_REGION_CONTROL).offset + p.control.barrier_inbox_offset;
  for (int w = 0; w < nranks; ++w) words.push_back({inbox + 8ull * w, w});
  return words;
}

// Every signal word of a low-latency plan a rank receives: the barrier's, and each writer's
// word of the two slots' dispatch and combine arrays (kernels/device/step_signal.cuh).
std::vector<SignalWord> ll_words(const epc::Plan& p, int nranks) {
  std::vector<SignalWord> words = barrier_words(p, nranks);
  // Each slot's signal region: per writer, its step signal and its credit.
  for (uint32_t s = 0; s < p.num_slots; ++s) {
    for (EpcRegionKind kind : {EPC_REGION_DISPATCH_SIGNAL, EPC_REGION_COMBINE_SIGNAL}) {
      for (int w = 0; w < nranks; ++w) {
        words.push_back({p.region(kind, s).offset + epc::kernels::ll_step_signal_offset(w), w});
        words.push_back({p.region(kind, s).offset + epc::kernels::ll_credit_offset(w), w});
      }
    }
  }
  return words;
}

// Every signal word of a high-throughput plan across nodes that a rank receives from the
// network or from its node: the barrier's, layout signals of both rounds (ht_layout.cu,
// ht_layout_capacity.cuh), acknowledgements
// (ht_step_kernel.cuh), combine chunk flags (ht_combine_send.cuh, ht_combine_forward.cuh:
// row x is written by x when x is in the reader's node or is its rail peer in another node
// (the partials), else by the reader's node-mate with x's local index), rail flags
// (ht_dispatch_rail.cuh; row = the writer's node, written by the writer's rank with this
// rank's local index). Dispatch chunk flags are left out: forwarders in the reader's node
// raise them.
std::vector<SignalWord> ht_words(const epc::GroupConfig& c, const epc::Plan& p, const epc::Topology& t, int reader) {
  const int R = t.nranks, C = epc::kernels::ht_chunks(static_cast<int>(c.max_tokens_per_rank));
  const uint64_t acks = epc::ht_acks_offset(c, R);
  std::vector<SignalWord> words = barrier_words(p, R);
  for (uint32_t s = 0; s < epc::kHtLayoutSlots; ++s) {
    const uint64_t slot = p.region(EPC_REGION_LAYOUT, s).offset;
    for (int w = 0; w < R; ++w) {
      words.push_back({slot + 8ull * w, w});
      words.push_back({slot + epc::ht_layout_round2_signals(R) + 8ull * w, w});  // ht_layout_capacity.cuh
    }
  }
  for (int w = 0; w < R; ++w) {
    words.push_back({p.region(EPC_REGION_DISPATCH_SIGNAL).offset + acks + 8ull * w, w});
    words.push_back({p.region(EPC_REGION_COMBINE_SIGNAL).offset + acks + 8ull * w, w});
    const bool direct = w / t.node_size == reader / t.node_size || w % t.node_size == reader % t.node_size;
    const int writer = direct ? w : reader / t.node_size * t.node_size + w % t.node_size;
    for (int chunk = 0; chunk < C; ++chunk) {
      words.push_back({p.region(EPC_REGION_COMBINE_SIGNAL).offset + 8ull * (static_cast<uint64_t>(w) * C + chunk),
                       writer, !direct});
    }
  }
  for (int m = 0; m < t.nodes(); ++m) {
    const int writer = m * t.node_size + reader % t.node_size;  // the reader's rail peer in node m
    for (int chunk = 0; chunk < C; ++chunk) {
      words.push_back(
          {p.region(EPC_REGION_RAIL_SIGNAL).offset + 8ull * (static_cast<uint64_t>(m) * C + chunk), writer});
    }
  }
  return words;
}

// For every reader: words from other nodes get distinct ids covering [0, gin_signals);
// words of the reader's own node's rows get none.
void expect_dense_ids(const epc::Plan& p, const epc::Topology& t,
                      const std::vector<std::vector<SignalWord>>& words_of_reader) {
  for (int reader = 0; reader < t.nranks; ++reader) {
    const int node = reader / t.node_size;
    std::set<uint32_t> ids;
    for (const SignalWord& w : words_of_reader[reader]) {
      const uint32_t id = p.gin_signal_map.id(w.offset, node);
      if (w.written_in_node_for_another_node) continue;
      if (w.writer / t.node_size == node) {
        EXPECT_EQ(id, kNoGinSignal) << "reader " << reader << " writer " << w.writer << " offset " << w.offset;
        continue;
      }
      ASSERT_NE(id, kNoGinSignal) << "reader " << reader << " writer " << w.writer << " offset " << w.offset;
      EXPECT_LT(id, p.gin_signals);
      EXPECT_TRUE(ids.insert(id).second) << "id " << id << " given twice (reader " << reader << ")";
    }
    EXPECT_EQ(ids.size(), p.gin_signals) << "reader " << reader;
  }
}

TEST(GinSignalPlan, LowLatencyOneIdPerRemoteWriterAndSlotArray) {
  const auto c = config(EPC_MODE_LOW_LATENCY, 64, 64);
  const epc::Topology t{8, 4, 2, 4};
  const epc::Plan p = epc::make_plan(c, t);
  // (barrier + 2 slots * (dispatch, combine) * (step signal, credit)) * 4 writers in the
  // other node.
  EXPECT_EQ(p.gin_signals, (1u + 2u * 2u * 2u) * 4u);
  EXPECT_EQ(p.gin_contexts, 1u);
  EXPECT_EQ(p.gin_signal_map.count, 5u);
  std::vector<std::vector<SignalWord>> words(8, ll_words(p, 8));
  expect_dense_ids(p, t, words);
  // Reader 0 (node 0) numbers writers 4..7, reader 5 (node 1) writers 0..3, from id 0 on
  // (the barrier's), then the dispatch rows of slot 0 (step signal, credit) from id 4 on.
  EXPECT_EQ(p.gin_signal_map.id(8 * 4, 0), 0u);
  EXPECT_EQ(p.gin_signal_map.id(8 * 3, 1), 3u);
  const uint64_t dispatch0 = p.region(EPC_REGION_DISPATCH_SIGNAL, 0).offset;
  EXPECT_EQ(p.gin_signal_map.id(dispatch0 + 16 * 4, 0), 4u);
  EXPECT_EQ(p.gin_signal_map.id(dispatch0 + 16 * 4 + 8, 0), 5u);
  EXPECT_EQ(p.gin_signal_map.id(dispatch0 + 16 * 7 + 8, 0), 11u);
  EXPECT_EQ(p.gin_signal_map.id(dispatch0 + 16 * 0, 1), 4u);
  EXPECT_EQ(p.gin_signal_map.id(dispatch0 + 16 * 3 + 8, 1), 11u);
  EXPECT_EQ(p.gin_signal_map.id(p.region(EPC_REGION_COMBINE_SIGNAL, 0).offset + 16 * 4, 0), 12u);
}

TEST(GinSignalPlan, HighThroughputAcrossTwoAndFourNodes) {
  const auto c = config(EPC_MODE_HIGH_THROUGHPUT, 64, 64);  // 32 chunks per source
  for (const epc::Topology& t : {epc::Topology{16, 8, 2, 8}, epc::Topology{16, 4, 4, 4}}) {
    const epc::Plan p = epc::make_plan(c, t);
    const uint32_t remote_ranks = static_cast<uint32_t>(t.nranks - t.node_size);
    const uint32_t remote_nodes = static_cast<uint32_t>(t.num_nodes - 1);
    // The barrier, layout (2 slots, 2 rounds) and two acknowledgement arrays: one id per
    // remote rank each; combine flags (partials from the rail peers) and rail flags 32 per
    // remote node each.
    EXPECT_EQ(p.gin_signals, 7 * remote_ranks + 32 * remote_nodes + 32 * remote_nodes) << t.num_nodes;
    EXPECT_EQ(p.gin_signal_map.count, 9u);
    std::vector<std::vector<SignalWord>> words;
    for (int reader = 0; reader < t.nranks; ++reader) words.push_back(ht_words(c, p, t, reader));
    expect_dense_ids(p, t, words);
  }
}

TEST(GinSignalPlan, WordsThatNoRemoteRankSignalsHaveNoId) {
  const auto c = config(EPC_MODE_HIGH_THROUGHPUT, 64, 64);
  const epc::Plan p = epc::make_plan(c, {16, 8, 2, 8});
  const epc::kernels::GinSignalMap& map = p.gin_signal_map;
  // Dispatch chunk flags (raised by forwarders inside the node), payload slots, staging,
  // the barrier word of a rank of the reader's node, a misaligned offset inside an array.
  EXPECT_EQ(map.id(p.region(EPC_REGION_DISPATCH_SIGNAL).offset + 8 * 9 * 32, 0), kNoGinSignal);
  EXPECT_EQ(map.id(p.region(EPC_REGION_COMBINE_RECV).offset, 0), kNoGinSignal);
  EXPECT_EQ(map.id(p.region(EPC_REGION_NET_STAGING).offset, 0), kNoGinSignal);
  EXPECT_EQ(map.id(0, 0), kNoGinSignal);
  EXPECT_EQ(map.id(p.region(EPC_REGION_LAYOUT, 0).offset + 8 * 9 + 4, 0), kNoGinSignal);
  // Past both rounds' layout signals: the count words of the same region.
  EXPECT_EQ(map.id(p.region(EPC_REGION_LAYOUT, 0).offset + epc::ht_layout_words_offset(16), 0), kNoGinSignal);
}

TEST(GinSignalPlan, NoGinInsideOneLsaTeam) {
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    auto c = config(mode, 64, 64);
    c.virtual_node_size = 2;  // nodes, but one LSA team: the stand-in needs no signal ids
    const epc::Plan p = epc::make_plan(c, {8, 8, 1});
    EXPECT_EQ(p.gin_signals, 0u);
    EXPECT_EQ(p.gin_contexts, 0u);
    EXPECT_EQ(p.gin_signal_map.count, 0u);
    EXPECT_EQ(p.gin_signal_map.id(p.regions[1].offset, 0), kNoGinSignal);
  }
}

TEST(GinSignalPlan, VirtualNodesAcrossLsaTeamsNumberByNode) {
  // Nodes of 2 inside LSA teams of 4: every rank outside the node is reached by GIN.
  auto c = config(EPC_MODE_LOW_LATENCY, 64, 64);
  c.virtual_node_size = 2;
  const epc::Topology t{8, 4, 2, 2};
  const epc::Plan p = epc::make_plan(c, {8, 4, 2});
  EXPECT_EQ(p.gin_signals, (1u + 2u * 2u * 2u) * 6u);
  std::vector<std::vector<SignalWord>> words(8, ll_words(p, 8));
  expect_dense_ids(p, t, words);
}

TEST(GinSignalPlan, RefusesMoreSignalsThanNcclCanHold) {
  const auto small = config(EPC_MODE_HIGH_THROUGHPUT, 64, 64);
  const epc::Plan p = epc::make_plan(small, {16, 8, 2});
  // 65536 tokens: 32768 chunk flags per source; 65536 ranks each its own node: combine and
  // rail flags alone need 2 x 65535 x 32768 ids, past 2^30.
  const auto big = config(EPC_MODE_HIGH_THROUGHPUT, 65536, 65536);
  try {
    epc::plan_gin_signals(big, {65536, 1, 65536, 1}, p);
    FAIL() << "expected a refusal";
  } catch (const epc::Error& e) {
    EXPECT_EQ(e.status(), EPC_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("GIN signals"), std::string::npos) << e.what();
  }
}

}  // namespace
