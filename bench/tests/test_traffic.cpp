// SPDX-License-Identifier: Apache-2.0
// Byte counts worked out by hand for a tiny routing (2 ranks, 4 experts, top-2, hidden 8), and
// their split into NVLink and network bytes with virtual nodes (4 ranks in nodes of 2).
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "bench/traffic.hpp"
#include "core/config.hpp"
#include "core/planner.hpp"

namespace epc::bench {
namespace {

// Rank 0: token 0 -> experts {0, 2}, token 1 -> {1, masked}.
// Rank 1: token 0 -> {3, 2},         token 1 -> {0, 3}.
// Experts 0, 1 live on rank 0; 2, 3 on rank 1.
std::vector<Routing> tiny() { return {{0, 2, 1, -1}, {3, 2, 0, 3}}; }

TEST(Traffic, RankZero) {
  const WireFormat w = WireFormat::for_dtype(8, false, 2);
  ASSERT_EQ(w.dispatch_row_bytes, 16);
  ASSERT_EQ(w.combine_row_bytes, 16);
  const RankTraffic t = compute_traffic(tiny(), 0, 2, 2, 4, w, 100);
  EXPECT_EQ(t.selections, 3);
  EXPECT_EQ(t.logical_dispatch_bytes, 48);
  EXPECT_EQ(t.logical_combine_bytes, 48);
  // To rank 1: token 0 with one entry (8 + 12 + 16); token 1, without one there, nothing.
  EXPECT_EQ(t.dispatch_to, (std::vector<int64_t>{0, 36}));
  // Plus one 8-byte signal and rank 1's count table (2 local experts * 4 bytes).
  EXPECT_EQ(t.wire_dispatch_bytes, 36 + 8 + 8);
  // Back to rank 1: its token 1 had an entry here (expert 0); its token 0 had none.
  EXPECT_EQ(t.combine_to, (std::vector<int64_t>{0, 16}));
  EXPECT_EQ(t.wire_combine_bytes, 24);
  EXPECT_EQ(t.baseline_rows_to, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(t.baseline_rows_from, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(t.baseline_wire_dispatch_bytes, 16 + 2 * 4);  // one row and 2 counts to rank 1
  EXPECT_EQ(t.baseline_wire_combine_bytes, 16);
  EXPECT_EQ(t.expected_counts, (std::vector<int32_t>{2, 1}));
  // Its 2 tokens read (bf16 rows of 16 B), the 3 entries received here written.
  EXPECT_EQ(t.memory_dispatch_bytes, (2 + 3) * 16);
  EXPECT_EQ(t.memory_combine_bytes, (3 + 2) * 16);
}

// With line records for ranks of at most 2 tokens (both here), rank 1's row comes back as a
// line record, twice the row, and rank 1 gets no combine signal; with at most 1 token (fewer
// than the 2 each rank has), as without them.
TEST(Traffic, LineRecordsDoubleTheRowAndDropTheSignal) {
  WireFormat w = WireFormat::for_dtype(8, false, 2);
  w.line_tokens = 2;
  const RankTraffic lines = compute_traffic(tiny(), 0, 2, 2, 4, w, 100);
  EXPECT_EQ(lines.combine_to, (std::vector<int64_t>{0, 32}));
  EXPECT_EQ(lines.wire_combine_bytes, 32);
  EXPECT_EQ(lines.logical_combine_bytes, 48);  // DeepEP's rule does not change
  w.line_tokens = 1;
  const RankTraffic records = compute_traffic(tiny(), 0, 2, 2, 4, w, 100);
  EXPECT_EQ(records.combine_to, (std::vector<int64_t>{0, 16}));
  EXPECT_EQ(records.wire_combine_bytes, 24);
}

// With dispatch line records for ranks of at most 2 tokens, rank 0's message to rank 1 (8 + 12 +
// 16 bytes) and rank 1's count table (2 * 4 bytes) go as line records, twice the bytes, and
// the signal as before; with at most 1 token, as without them.
TEST(Traffic, DispatchLineRecordsDoubleTheMessages) {
  WireFormat w = WireFormat::for_dtype(8, false, 2);
  w.dispatch_line_tokens = 2;
  const RankTraffic lines = compute_traffic(tiny(), 0, 2, 2, 4, w, 100);
  EXPECT_EQ(lines.dispatch_to, (std::vector<int64_t>{0, 72}));
  EXPECT_EQ(lines.wire_dispatch_bytes, 72 + 8 + 16);
  EXPECT_EQ(lines.logical_dispatch_bytes, 48);
  w.dispatch_line_tokens = 1;
  const RankTraffic records = compute_traffic(tiny(), 0, 2, 2, 4, w, 100);
  EXPECT_EQ(records.dispatch_to, (std::vector<int64_t>{0, 36}));
  EXPECT_EQ(records.wire_dispatch_bytes, 36 + 8 + 8);
}

TEST(Traffic, RankOne) {
  const WireFormat w = WireFormat::for_dtype(8, false, 2);
  const RankTraffic t = compute_traffic(tiny(), 1, 2, 2, 4, w, 100);
  EXPECT_EQ(t.selections, 4);
  EXPECT_EQ(t.dispatch_to, (std::vector<int64_t>{36, 0}));  // its token 1 (expert 0)
  EXPECT_EQ(t.combine_to, (std::vector<int64_t>{16, 0}));
  EXPECT_EQ(t.baseline_rows_to, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(t.baseline_rows_from, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(t.expected_counts, (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(t.memory_dispatch_bytes, (2 + 4) * 16);
  EXPECT_EQ(t.memory_combine_bytes, (4 + 2) * 16);
}

TEST(Traffic, CountsAreCappedAtTheRowCapacity) {
  const RankTraffic t = compute_traffic(tiny(), 1, 2, 2, 4, WireFormat::for_dtype(8, false, 2), 1);
  EXPECT_EQ(t.expected_counts, (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(t.memory_dispatch_bytes, (2 + 2) * 16);  // only the rows that fit are written
}

TEST(Traffic, Fp8RowsCarryScales) {
  const WireFormat w = WireFormat::for_dtype(7168, true, 8);
  EXPECT_EQ(w.dispatch_row_bytes, 7168 + 56 * 4);
  EXPECT_EQ(w.combine_row_bytes, 2 * 7168);
  EXPECT_NE(w.describe().find("7392"), std::string::npos);
  // LL fp8 dispatch reads bf16 tokens (cast in the kernel) and writes e4m3 rows with scales.
  const RankTraffic t = compute_traffic(tiny(), 0, 2, 2, 4, WireFormat::for_dtype(128, true, 2), 100);
  EXPECT_EQ(t.memory_dispatch_bytes, 2 * 256 + 3 * (128 + 4));
  EXPECT_EQ(t.memory_combine_bytes, (3 + 2) * 256);
}

// High-throughput: each token once per destination rank, self included (same tiny routing).
TEST(Traffic, HighThroughputRankZero) {
  const WireFormat w = WireFormat::for_ht(8, false, 2);
  ASSERT_EQ(w.dispatch_row_bytes, 16);
  ASSERT_EQ(w.ht_meta_bytes, 16);  // 2 int32 ids + 2 fp32 weights
  const RankTraffic t = compute_traffic(tiny(), 0, 2, 2, 4, w, 1 << 30);
  EXPECT_EQ(t.selections, 3);
  EXPECT_EQ(t.token_ranks, 3);      // token 0 to ranks 0 and 1, token 1 to rank 0
  EXPECT_EQ(t.received_tokens, 3);  // its own tokens 0 and 1, rank 1's token 1
  EXPECT_EQ(t.logical_dispatch_bytes, 3 * 16);
  EXPECT_EQ(t.logical_combine_bytes, 3 * 16);
  // To rank 1: token 0's slot (row 16 + ids and weights 16).
  EXPECT_EQ(t.dispatch_to, (std::vector<int64_t>{0, 32}));
  // Plus one chunk flag (2 tokens fit one chunk) and one acknowledgement.
  EXPECT_EQ(t.wire_dispatch_bytes, 32 + 8 + 8);
  // Back to rank 1: the row of its token 1, one chunk flag, one acknowledgement.
  EXPECT_EQ(t.combine_to, (std::vector<int64_t>{0, 16}));
  EXPECT_EQ(t.wire_combine_bytes, 16 + 8 + 8);
  EXPECT_EQ(t.wire_layout_bytes, (2 + 2) * 4 + 8);
  EXPECT_EQ(t.baseline_rows_to, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(t.baseline_rows_from, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(t.baseline_wire_dispatch_bytes, 32 + 4);  // one row with its routing, one count
  EXPECT_EQ(t.baseline_wire_combine_bytes, 16);
  EXPECT_EQ(t.expected_counts, (std::vector<int32_t>{2, 1}));
  // Its 2 tokens read, the 3 tokens received written once each (not once per entry).
  EXPECT_EQ(t.memory_dispatch_bytes, (2 + 3) * 16);
  EXPECT_EQ(t.memory_combine_bytes, (3 + 2) * 16);
}

TEST(Traffic, HighThroughputRankOne) {
  const RankTraffic t = compute_traffic(tiny(), 1, 2, 2, 4, WireFormat::for_ht(8, false, 2), 1 << 30);
  EXPECT_EQ(t.selections, 4);
  EXPECT_EQ(t.token_ranks, 3);  // token 0 once to itself (two entries there), token 1 to both
  EXPECT_EQ(t.received_tokens, 3);
  EXPECT_EQ(t.dispatch_to, (std::vector<int64_t>{32, 0}));
  EXPECT_EQ(t.combine_to, (std::vector<int64_t>{16, 0}));
  EXPECT_EQ(t.baseline_rows_to, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(t.baseline_rows_from, (std::vector<int64_t>{1, 2}));
  // A duplicate-free token with two entries on this rank counts for both experts.
  EXPECT_EQ(t.expected_counts, (std::vector<int32_t>{2, 2}));
}

// Weights at combine (EPC_WEIGHTING_HOME): a row per (token, entry) returns, not one per
// (token, rank). Rank 0's token 0 has both entries on rank 1: two rows come back to it.
TEST(Traffic, HighThroughputCombinePerEntry) {
  const std::vector<Routing> routing = {{2, 3, 1, -1}, {3, 2, 0, 3}};
  WireFormat w = WireFormat::for_ht(8, false, 2);
  EXPECT_EQ(compute_traffic(routing, 1, 2, 2, 4, w, 1 << 30).combine_to, (std::vector<int64_t>{16, 0}));
  w.combine_per_entry = true;
  EXPECT_EQ(compute_traffic(routing, 1, 2, 2, 4, w, 1 << 30).combine_to, (std::vector<int64_t>{32, 0}));
  // Rank 1's token 1 has one entry (expert 0) on rank 0: one row either way.
  EXPECT_EQ(compute_traffic(routing, 0, 2, 2, 4, w, 1 << 30).combine_to, (std::vector<int64_t>{0, 16}));
  // The ceiling's buffers: with hidden 64, dispatch slots (128 + 16 B) outweigh combine rows
  // (128 B) per token, but not two rows per token.
  WireFormat wide = WireFormat::for_ht(64, false, 2);
  EXPECT_EQ(wide.max_bytes_to_peer(10, 2, 2, 0), 10 * (128 + 16));
  wide.combine_per_entry = true;
  EXPECT_EQ(wide.max_bytes_to_peer(10, 2, 2, 0), 10 * 2 * 128);
}

TEST(Traffic, HighThroughputFp8AndChunks) {
  const WireFormat w = WireFormat::for_ht(7168, true, 8);
  EXPECT_EQ(w.dispatch_row_bytes, 7168 + 56 * 4);
  EXPECT_EQ(w.combine_row_bytes, 2 * 7168);
  EXPECT_NE(w.describe().find("high-throughput"), std::string::npos);
  EXPECT_EQ(w.max_bytes_to_peer(100, 8), 100 * 2 * 7168);  // combine rows are the larger
  EXPECT_EQ(WireFormat::for_ht(7168, false, 8).max_bytes_to_peer(10, 8), 10 * (2 * 7168 + 64));
  // The chunk size is the kernels' (kernels/wire/ht_message.hpp).
  const WireFormat one = WireFormat::for_ht(8, false, 1);
  ASSERT_GT(one.ht_chunk_tokens, 0);
  // Two chunks and one token: every token's one entry on rank 1.
  const int tokens = static_cast<int>(2 * one.ht_chunk_tokens + 1);
  std::vector<Routing> all(2, Routing(static_cast<size_t>(tokens), 3));
  const RankTraffic t = compute_traffic(all, 0, tokens, 1, 4, one, 1 << 30);
  EXPECT_EQ(t.dispatch_to[1], tokens * (16 + 8));
  EXPECT_EQ(t.wire_dispatch_bytes, tokens * 24 + 3 * 8 + 8);  // three chunk flags, one acknowledgement
  EXPECT_EQ(t.received_tokens, 0);
  EXPECT_EQ(t.wire_combine_bytes, 8);  // nothing returns from rank 0: its acknowledgement only
  const RankTraffic u = compute_traffic(all, 1, tokens, 1, 4, one, 1 << 30);
  EXPECT_EQ(u.received_tokens, 2 * tokens);
  EXPECT_EQ(u.wire_combine_bytes, tokens * 16 + 3 * 8 + 8);
}

TEST(Traffic, LowLatencyMaxBytesToPeer) {
  const WireFormat w = WireFormat::for_dtype(8, false, 2);
  EXPECT_EQ(w.max_bytes_to_peer(10, 2), 10 * (8 + 2 * 12 + 16));
}

TEST(Traffic, WithoutVirtualNodesEverythingIsNvlink) {
  for (const WireFormat& w : {WireFormat::for_dtype(8, false, 2), WireFormat::for_ht(8, false, 2)}) {
    for (int rank : {0, 1}) {
      const RankTraffic t = compute_traffic(tiny(), rank, 2, 2, 4, w, 100);
      EXPECT_EQ(t.wire_dispatch_network_bytes, 0);
      EXPECT_EQ(t.wire_combine_network_bytes, 0);
      EXPECT_EQ(t.wire_layout_network_bytes, 0);
      EXPECT_EQ(t.wire_dispatch_nvlink_bytes, t.wire_dispatch_bytes);
      EXPECT_EQ(t.wire_combine_nvlink_bytes, t.wire_combine_bytes);
      EXPECT_EQ(t.wire_layout_nvlink_bytes, t.wire_layout_bytes);
      // A node of every rank is the same as no virtual nodes.
      const RankTraffic same = compute_traffic(tiny(), rank, 2, 2, 4, w, 100, 2);
      EXPECT_EQ(same.wire_dispatch_bytes, t.wire_dispatch_bytes);
      EXPECT_EQ(same.wire_combine_network_bytes, 0);
      EXPECT_EQ(same.dispatch_to, t.dispatch_to);
    }
  }
}

// 4 ranks in virtual nodes of 2: node 0 = ranks {0, 1}, node 1 = ranks {2, 3}. 8 experts, two
// per rank (rank r hosts 2r and 2r + 1), top-2, hidden 8, 2 tokens per rank:
//   rank 0: token 0 -> {2, 5} (ranks 1, 2)   token 1 -> {7, -1} (rank 3)
//   rank 1: token 0 -> {0, 1} (rank 0 twice) token 1 -> {4, 6}  (ranks 2, 3)
//   rank 2: token 0 -> {1, 3} (ranks 0, 1)   token 1 -> {5, -1} (rank 2 itself)
//   rank 3: token 0 -> {0, 7} (ranks 0, 3)   token 1 -> {2, 4}  (ranks 1, 2)
std::vector<Routing> four_ranks() { return {{2, 5, 7, -1}, {0, 1, 4, 6}, {1, 3, 5, -1}, {0, 7, 2, 4}}; }

// Message sizes, hidden 8, top-2 (bf16 rows of 16 B):
//   LL over NVLink:  a header of 8 B + 12 B per entry there, and the 16 B row when it has one;
//                    combine a 16 B row; per peer an 8 B count table (2 experts) and 8 B signal
//                    in dispatch, an 8 B signal in combine.
//   LL via network:  the whole slot: header room for 2 entries 8 + 24 -> 32 B, and the row:
//                    48 B; combine 16 B; tables and signals as above.
//   LL sends a token's message only to the ranks hosting one of its entries.
//   HT over NVLink:  a 16 B row + 16 B of ids and weights = 32 B per (token, peer with entries);
//                    combine a 16 B row; per peer one 8 B chunk flag (2 tokens, one chunk) and
//                    an 8 B acknowledgement; combine one flag per 2 returned rows (none when
//                    nothing returns) and an 8 B acknowledgement; layout (2 + 2) * 4 + 8 = 24 B.
//   HT via network:  whole slots: dispatch row 16 + scales room 16 + ids 16 + weights 16 = 64 B,
//                    combine row 16 + weights room 16 = 32 B; flags, acks and layout as above.
TEST(Traffic, VirtualNodesSplitLowLatencyBytes) {
  const WireFormat w = WireFormat::for_dtype(8, false, 2);
  ASSERT_EQ(w.net_dispatch_message_bytes, 48);
  ASSERT_EQ(w.net_combine_row_bytes, 16);

  // Rank 0 dispatch, a message per (token, peer with entries):
  //   rank 1 (NVLink):  token 0 one entry 8 + 12 + 16 = 36;                     + 8 + 8 = 52
  //   rank 2 (network): token 0 48;                                             + 8 + 8 = 64
  //   rank 3 (network): token 1 48;                                             + 8 + 8 = 64
  // Rank 0 combine, a row per token of a peer with entries on rank 0, then a signal:
  //   rank 1 (NVLink):  its token 0 (experts 0, 1): 16 + 8 = 24
  //   rank 2 (network): its token 0 (expert 1):     16 + 8 = 24
  //   rank 3 (network): its token 0 (expert 0):     16 + 8 = 24
  const RankTraffic r0 = compute_traffic(four_ranks(), 0, 2, 2, 8, w, 100, 2);
  EXPECT_EQ(r0.dispatch_to, (std::vector<int64_t>{0, 36, 48, 48}));
  EXPECT_EQ(r0.wire_dispatch_nvlink_bytes, 52);
  EXPECT_EQ(r0.wire_dispatch_network_bytes, 128);
  EXPECT_EQ(r0.wire_dispatch_bytes, 180);
  EXPECT_EQ(r0.combine_to, (std::vector<int64_t>{0, 16, 16, 16}));
  EXPECT_EQ(r0.wire_combine_nvlink_bytes, 24);
  EXPECT_EQ(r0.wire_combine_network_bytes, 48);
  EXPECT_EQ(r0.wire_combine_bytes, 72);
  EXPECT_EQ(r0.wire_layout_bytes, 0);  // LL handles are local

  // Rank 3 dispatch:
  //   rank 0 (network): token 0 48;                                            + 16 = 64
  //   rank 1 (network): token 1 48;                                            + 16 = 64
  //   rank 2 (NVLink):  token 1 one entry 36;                                  + 16 = 52
  // Rank 3 combine (experts 6, 7): rank 0's token 1 (7) and rank 1's token 1 (6) return over
  // the network, nothing to rank 2 but its signal:
  //   network (16 + 8) * 2 = 48, NVLink 8
  const RankTraffic r3 = compute_traffic(four_ranks(), 3, 2, 2, 8, w, 100, 2);
  EXPECT_EQ(r3.dispatch_to, (std::vector<int64_t>{48, 48, 36, 0}));
  EXPECT_EQ(r3.wire_dispatch_nvlink_bytes, 52);
  EXPECT_EQ(r3.wire_dispatch_network_bytes, 128);
  EXPECT_EQ(r3.combine_to, (std::vector<int64_t>{16, 16, 0, 0}));
  EXPECT_EQ(r3.wire_combine_nvlink_bytes, 8);
  EXPECT_EQ(r3.wire_combine_network_bytes, 48);

  // The same routing without virtual nodes: every peer over NVLink, in NVLink sizes
  // (36 + 16 per peer), so the total counts what really moves: network puts whole slots.
  const RankTraffic flat = compute_traffic(four_ranks(), 0, 2, 2, 8, w, 100);
  EXPECT_EQ(flat.wire_dispatch_bytes, 3 * 52);
  EXPECT_EQ(flat.wire_dispatch_network_bytes, 0);
  EXPECT_EQ(flat.wire_combine_bytes, 72);
  // The baseline does not use virtual nodes: its bytes are the same either way.
  EXPECT_EQ(flat.baseline_wire_dispatch_bytes, r0.baseline_wire_dispatch_bytes);
  EXPECT_EQ(flat.baseline_wire_combine_bytes, r0.baseline_wire_combine_bytes);
}

// LL with EPC_WEIGHTING_HOME across virtual nodes of 1 (the routing above): every entry's
// row returns through the network, no partials. Rank 0 combine (experts 0, 1):
//   rank 1's token 0 (experts 0, 1): two rows, 32; rank 2's token 0 (expert 1): 16;
//   rank 3's token 0 (expert 0): 16; a signal of 8 to each: network 64 + 24 = 88.
// With SENDER, one partial per (token, rank) instead: 16 to rank 1 (network 72).
TEST(Traffic, VirtualNodesLowLatencyWeightsAtHomeReturnEveryEntry) {
  WireFormat w = WireFormat::for_dtype(8, false, 2);
  const RankTraffic partials = compute_traffic(four_ranks(), 0, 2, 2, 8, w, 100, 1);
  EXPECT_EQ(partials.combine_to, (std::vector<int64_t>{0, 16, 16, 16}));
  EXPECT_EQ(partials.wire_combine_network_bytes, 72);
  w.combine_per_entry = true;
  const RankTraffic home = compute_traffic(four_ranks(), 0, 2, 2, 8, w, 100, 1);
  EXPECT_EQ(home.combine_to, (std::vector<int64_t>{0, 32, 16, 16}));
  EXPECT_EQ(home.wire_combine_network_bytes, 88);
  EXPECT_EQ(home.wire_combine_nvlink_bytes, 0);
  EXPECT_EQ(home.dispatch_to, partials.dispatch_to);  // dispatch does not change
  // The ceiling's window, nodes of one rank (hidden 8, top-2): 10 whole 48 B messages
  // (480 B) outweigh 10 partials (160 B), and 10 tokens of 2 entry rows (320 B).
  EXPECT_EQ(w.max_bytes_to_peer(10, 2, 4, 1), 10 * 48);
  WireFormat wide = WireFormat::for_dtype(64, false, 2);  // rows of 128 B: 2 rows outweigh a message
  EXPECT_EQ(wide.max_bytes_to_peer(10, 2, 4, 1), 10 * (32 + 128));
  wide.combine_per_entry = true;
  EXPECT_EQ(wide.max_bytes_to_peer(10, 2, 4, 1), 10 * 2 * 128);
}

// HT dispatch across nodes goes by rail (kernels/ht/ht_dispatch_rail.cuh, ht_dispatch_forward.cuh).
// In nodes of 2 the rank with local index i of one node is the rail peer of the rank with
// local index i of the other: 0 <-> 2, 1 <-> 3. A source stores each token's 32 B slot over
// NVLink into the other rank of its node when that rank has entries; it puts one 96 B rail
// slot (the 64 B dispatch slot + 2 int32 rows and 2 int32 entry places, each padded to 16 B) per token with entries in the
// other node into its rail peer there, whichever ranks of that node have them. The rail peer
// forwards the token over NVLink into the 32 B slot of the other rank of its node when that
// rank has entries (its own rows land in its own window: no wire bytes). Flags: one chunk
// (2 tokens) per source; a source flags the other rank of its node once and its rail peer once
// (a rail flag); the forwarder flags the other rank of its node once more for the chunk it
// forwarded. Acknowledgements: 8 B to every peer (remote ones over the network). Combine goes
// by rail too: a row for a source in the other node returns over NVLink to the source's rail
// peer in this node (read in place when that is this rank), which puts one 32 B partial per
// token of its rail source that had rows in its node, and a flag per chunk that had one.
TEST(Traffic, VirtualNodesSplitHighThroughputBytes) {
  const WireFormat w = WireFormat::for_ht(8, false, 2);
  ASSERT_EQ(w.net_dispatch_message_bytes, 64);
  ASSERT_EQ(w.net_rail_slot_bytes(2), 64 + 16 + 16);
  ASSERT_EQ(w.net_combine_row_bytes, 32);

  // Rank 0 (node 0; rail peer 2, forwards for 2):
  //   own token 0 (ranks 1, 2): slot to rank 1 over NVLink 32, rail slot to rank 2 96
  //   own token 1 (rank 3):     rail slot to rank 2 96 (rank 3 gets it from rank 2)
  //   rank 2's token 0 (ranks 0, 1), forwarded: slot to rank 1 32 (its own row: local)
  //   rank 2's token 1 (rank 2 itself): does not come to node 0
  //   dispatch_to {0, 32 + 32, 96 + 96, 0}
  //   NVLink:  64 + two flags to rank 1 (its own chunk, rank 2's chunk) 16 + ack 8 = 88
  //   network: 192 + rail flag to rank 2 8 + acks to ranks 2 and 3 16          = 216
  //   (direct to every rank, as before the rails: NVLink 48, network 160)
  // Rank 0 combine (experts 0, 1): rows of ranks 1, 2, 3's token 0.
  //   rank 1's row: back to rank 1 over NVLink 16, a flag
  //   rank 2's row: rank 2's rail peer here is rank 0 itself: read in place
  //   rank 3's row: to rank 3's rail peer here, rank 1, over NVLink 16, a flag
  //   partials for rank 2 (rank 0's rail source): its token 0 had rows on ranks 0 and 1: one
  //   32 B partial over the network and a flag; its token 1 did not come
  //   rank 1 (NVLink): 32 + 2 flags 16 + ack 8 = 56; rank 2: 32 + 8 + 8 = 48; rank 3: ack 8
  // Layout: 24 B per peer, one over NVLink, two over the network.
  const RankTraffic r0 = compute_traffic(four_ranks(), 0, 2, 2, 8, w, 1 << 30, 2);
  EXPECT_EQ(r0.dispatch_to, (std::vector<int64_t>{0, 64, 192, 0}));
  EXPECT_EQ(r0.wire_dispatch_nvlink_bytes, 88);
  EXPECT_EQ(r0.wire_dispatch_network_bytes, 216);
  EXPECT_EQ(r0.wire_dispatch_bytes, 304);
  EXPECT_EQ(r0.combine_to, (std::vector<int64_t>{0, 32, 32, 0}));
  EXPECT_EQ(r0.wire_combine_nvlink_bytes, 56);
  EXPECT_EQ(r0.wire_combine_network_bytes, 56);
  EXPECT_EQ(r0.wire_combine_bytes, 112);
  EXPECT_EQ(r0.wire_layout_nvlink_bytes, 24);
  EXPECT_EQ(r0.wire_layout_network_bytes, 48);
  EXPECT_EQ(r0.wire_layout_bytes, 72);
  // The logical bytes do not depend on the path: 3 (token, destination) rows of 16 B.
  EXPECT_EQ(r0.logical_dispatch_bytes, 3 * 16);

  // Rank 1 (node 0; rail peer 3, forwards for 3):
  //   own token 0 (rank 0 twice): slot to rank 0 32
  //   own token 1 (ranks 2, 3):   rail slot to rank 3 96
  //   rank 3's token 0 (ranks 0, 3), forwarded: slot to rank 0 32
  //   rank 3's token 1 (ranks 1, 2): its row here is local
  //   NVLink:  64 + two flags to rank 0 16 + ack 8 = 88
  //   network: 96 + rail flag to rank 3 8 + acks to ranks 2 and 3 16 = 120
  const RankTraffic r1 = compute_traffic(four_ranks(), 1, 2, 2, 8, w, 1 << 30, 2);
  EXPECT_EQ(r1.dispatch_to, (std::vector<int64_t>{64, 0, 0, 96}));
  EXPECT_EQ(r1.wire_dispatch_nvlink_bytes, 88);
  EXPECT_EQ(r1.wire_dispatch_network_bytes, 120);

  // Rank 2 (node 1; rail peer 0, forwards for 0):
  //   own token 0 (ranks 0, 1): rail slot to rank 0 96 (rank 0 forwards to rank 1)
  //   own token 1 (rank 2 itself): nothing on the wire
  //   rank 0's token 0 (ranks 1, 2): its row here is local
  //   rank 0's token 1 (rank 3), forwarded: slot to rank 3 32
  //   NVLink:  32 + two flags to rank 3 16 + ack 8 = 56
  //   network: 96 + rail flag to rank 0 8 + acks to ranks 0 and 1 16 = 120
  const RankTraffic r2 = compute_traffic(four_ranks(), 2, 2, 2, 8, w, 1 << 30, 2);
  EXPECT_EQ(r2.dispatch_to, (std::vector<int64_t>{96, 0, 0, 32}));
  EXPECT_EQ(r2.wire_dispatch_nvlink_bytes, 56);
  EXPECT_EQ(r2.wire_dispatch_network_bytes, 120);

  // Rank 3 (node 1; rail peer 1, forwards for 1):
  //   own token 0 (ranks 0, 3): rail slot to rank 1 96 (its own row: local)
  //   own token 1 (ranks 1, 2): slot to rank 2 32, rail slot to rank 1 96
  //   rank 1's token 0 (rank 0): does not come to node 1
  //   rank 1's token 1 (ranks 2, 3), forwarded: slot to rank 2 32
  //   NVLink:  64 + two flags to rank 2 16 + ack 8 = 88
  //   network: 192 + rail flag to rank 1 8 + acks to ranks 0 and 1 16 = 216
  // Rank 3 combine (experts 6, 7): rows of rank 0's token 1 and rank 1's token 1.
  //   rank 0's row: to rank 0's rail peer here, rank 2, over NVLink 16, a flag
  //   rank 1's row: rank 3 is rank 1's rail peer here: read in place
  //   partials for rank 1: its token 1 had rows on ranks 2 and 3: 32 B and a flag; its token 0
  //   did not come
  //   NVLink 16 + 8 + 8 = 32; network: rank 1 32 + 8 + 8, rank 0 its acknowledgement 8 = 56
  const RankTraffic r3 = compute_traffic(four_ranks(), 3, 2, 2, 8, w, 1 << 30, 2);
  EXPECT_EQ(r3.dispatch_to, (std::vector<int64_t>{0, 192, 64, 0}));
  EXPECT_EQ(r3.wire_dispatch_nvlink_bytes, 88);
  EXPECT_EQ(r3.wire_dispatch_network_bytes, 216);
  EXPECT_EQ(r3.combine_to, (std::vector<int64_t>{0, 32, 16, 0}));
  EXPECT_EQ(r3.wire_combine_nvlink_bytes, 32);
  EXPECT_EQ(r3.wire_combine_network_bytes, 56);

  // Six (token, other node) pairs cross in all (rank 0: 2, rank 1: 1, rank 2: 1, rank 3: 2),
  // each once as a 96 B rail slot.
  EXPECT_EQ(r0.dispatch_to[2] + r1.dispatch_to[3] + r2.dispatch_to[0] + r3.dispatch_to[1], 6 * 96);
}

// EPC_WEIGHTING_HOME across nodes of 2 (the routing above): every entry's row returns, and
// the rail peer forwards each entry row of its node unreduced, a whole 32 B slot each.
// Rank 0 combine (experts 0, 1):
//   rank 1's token 0 (experts 0, 1): two rows back to rank 1 over NVLink, 32
//   rank 2's token 0 (expert 1): rank 0 is rank 2's rail peer here: read in place
//   rank 3's token 0 (expert 0): one row to rank 3's rail peer here, rank 1, 16
//   for rank 2 (rank 0's rail source): its token 0 has an entry on rank 0 (expert 1) and one
//   on rank 1 (expert 3): two slots over the network, 64, and a flag; token 1 did not come
//   rank 1 (NVLink): 48 + 2 flags 16 + ack 8 = 72; rank 2: 64 + 8 + 8 = 80; rank 3: ack 8
TEST(Traffic, VirtualNodesWeightsAtHomeReturnEveryEntry) {
  WireFormat w = WireFormat::for_ht(8, false, 2);
  w.combine_per_entry = true;
  const RankTraffic r0 = compute_traffic(four_ranks(), 0, 2, 2, 8, w, 1 << 30, 2);
  EXPECT_EQ(r0.combine_to, (std::vector<int64_t>{0, 48, 64, 0}));
  EXPECT_EQ(r0.wire_combine_nvlink_bytes, 72);
  EXPECT_EQ(r0.wire_combine_network_bytes, 88);
  // Dispatch does not change.
  const RankTraffic partials = compute_traffic(four_ranks(), 0, 2, 2, 8, WireFormat::for_ht(8, false, 2), 1 << 30, 2);
  EXPECT_EQ(r0.dispatch_to, partials.dispatch_to);
  EXPECT_EQ(r0.wire_dispatch_bytes, partials.wire_dispatch_bytes);
  // The ceiling's window, nodes of one rank at top-8 (hidden 8): a rail slot is the 96 B
  // dispatch slot + 16 + 32 = 144 B, a combine slot 16 + 32 = 48 B; 10 tokens of 8 entry slots
  // (3840 B) outweigh the 10 rail slots (1440 B), where one partial per token (480 B) did not.
  WireFormat eight = WireFormat::for_ht(8, false, 8);
  EXPECT_EQ(eight.max_bytes_to_peer(10, 8, 8, 1), 10 * 144);
  eight.combine_per_entry = true;
  EXPECT_EQ(eight.max_bytes_to_peer(10, 8, 8, 1), 10 * 8 * 48);
}

// Nodes of one rank: every peer is another node and its own rail peer; a rail slot carries
// one row index and 2 entry places (64 + 16 + 16 = 96 B), nobody forwards to anyone but itself, nothing is NVLink;
// a combine partial is the one row of its node.
TEST(Traffic, VirtualNodesOfOneRank) {
  const WireFormat w = WireFormat::for_ht(8, false, 2);
  ASSERT_EQ(w.net_rail_slot_bytes(1), 64 + 16 + 16);
  // Rank 0: token 0 to nodes 1 and 2, token 1 to node 3: 3 rail slots of 96 B; a rail flag
  // (one chunk) and an acknowledgement to each of the 3 peers.
  const RankTraffic alone = compute_traffic(four_ranks(), 0, 2, 2, 8, w, 1 << 30, 1);
  EXPECT_EQ(alone.dispatch_to, (std::vector<int64_t>{0, 96, 96, 96}));
  EXPECT_EQ(alone.wire_dispatch_nvlink_bytes, 0);
  EXPECT_EQ(alone.wire_dispatch_network_bytes, 3 * 96 + 3 * 8 + 3 * 8);
  EXPECT_EQ(alone.wire_combine_nvlink_bytes, 0);
  EXPECT_EQ(alone.wire_combine_network_bytes, 3 * 48);
  EXPECT_EQ(alone.wire_layout_network_bytes, 3 * 24);
  // Rank 2: token 0 to nodes 0 and 1, token 1 to itself only: 2 rail slots; rank 3 gets
  // only its flag and acknowledgement.
  const RankTraffic two = compute_traffic(four_ranks(), 2, 2, 2, 8, w, 1 << 30, 1);
  EXPECT_EQ(two.dispatch_to, (std::vector<int64_t>{96, 96, 0, 0}));
  EXPECT_EQ(two.wire_dispatch_network_bytes, 2 * 96 + 3 * 8 + 3 * 8);
  // LL does not go by rail: a whole message (48 B) to every peer hosting an entry of a token.
  const RankTraffic ll = compute_traffic(four_ranks(), 0, 2, 2, 8, WireFormat::for_dtype(8, false, 2), 100, 1);
  EXPECT_EQ(ll.dispatch_to, (std::vector<int64_t>{0, 48, 48, 48}));
  EXPECT_EQ(ll.wire_dispatch_nvlink_bytes, 0);
}

// Whatever the routing: nvlink + network is the total, and network is 0 without virtual nodes.
// HT dispatch with several nodes, counted here another way: the network carries one rail slot
// per (token, other node with entries), one rail flag per chunk per other node and an
// acknowledgement per remote rank; NVLink one slot per (token, other rank of the node with
// entries) of the rank's own tokens and of those it forwards (from the rank with its local
// index in every other node), a flag per chunk per source it stands for (itself and nodes - 1
// others) per other rank of the node, and an acknowledgement per other rank of the node.
TEST(Traffic, NvlinkPlusNetworkIsTheTotal) {
  std::mt19937 random(7);
  const int R = 8, tokens = 37, topk = 4, experts = 32, L = experts / R;
  std::vector<Routing> all(R, Routing(static_cast<size_t>(tokens) * topk));
  for (Routing& r : all) {
    for (int64_t& e : r) e = static_cast<int64_t>(random() % (experts + 4)) - 4;  // some masked
  }
  // Whether token `tok` of rank `s` has an entry on rank `d`.
  auto has_entry = [&](int s, int tok, int d) {
    for (int k = 0; k < topk; ++k) {
      const int64_t e = all[static_cast<size_t>(s)][static_cast<size_t>(tok) * topk + k];
      if (e >= 0 && e / L == d) return true;
    }
    return false;
  };
  for (const WireFormat& w : {WireFormat::for_dtype(256, false, topk), WireFormat::for_dtype(256, true, topk),
                              WireFormat::for_ht(256, false, topk), WireFormat::for_ht(256, true, topk)}) {
    for (int node_size : {0, 1, 2, 4, 8}) {
      const int N = node_size == 0 ? R : node_size, nodes = R / N;
      const int64_t chunks = w.ht ? (tokens + w.ht_chunk_tokens - 1) / w.ht_chunk_tokens : 0;
      const int64_t slot = w.dispatch_row_bytes + w.ht_meta_bytes;
      int64_t nvlink_payload_all = 0, expected_nvlink_payload_all = 0;
      for (int rank = 0; rank < R; ++rank) {
        const RankTraffic t = compute_traffic(all, rank, tokens, topk, experts, w, 1 << 30, node_size);
        EXPECT_EQ(t.wire_dispatch_nvlink_bytes + t.wire_dispatch_network_bytes, t.wire_dispatch_bytes);
        EXPECT_EQ(t.wire_combine_nvlink_bytes + t.wire_combine_network_bytes, t.wire_combine_bytes);
        EXPECT_EQ(t.wire_layout_nvlink_bytes + t.wire_layout_network_bytes, t.wire_layout_bytes);
        if (node_size == 0 || node_size == R) {
          EXPECT_EQ(t.wire_dispatch_network_bytes + t.wire_combine_network_bytes + t.wire_layout_network_bytes, 0);
        } else {
          EXPECT_GT(t.wire_dispatch_network_bytes, 0);  // at least the signals
        }
        if (node_size == 1) {
          EXPECT_EQ(t.wire_dispatch_nvlink_bytes + t.wire_combine_nvlink_bytes, 0);
        }
        // The ceiling's window holds what this rank sends any one peer.
        for (int d = 0; d < R; ++d) {
          EXPECT_LE(t.dispatch_to[static_cast<size_t>(d)], w.max_bytes_to_peer(tokens, topk, R, node_size));
          EXPECT_LE(t.combine_to[static_cast<size_t>(d)], w.max_bytes_to_peer(tokens, topk, R, node_size));
        }
        if (!w.ht || nodes == 1) continue;
        const int own = rank / N;
        int64_t crossings = 0, direct = 0, forwarded = 0;
        for (int tok = 0; tok < tokens; ++tok) {
          for (int m = 0; m < nodes; ++m) {
            bool goes = false;
            for (int d = m * N; d < (m + 1) * N; ++d) goes = goes || has_entry(rank, tok, d);
            if (m != own && goes) crossings++;
          }
          for (int d = own * N; d < (own + 1) * N; ++d) {
            if (d == rank) continue;
            if (has_entry(rank, tok, d)) direct++;
            for (int m = 0; m < nodes; ++m) {
              if (m != own && has_entry(m * N + rank % N, tok, d)) forwarded++;
            }
          }
        }
        EXPECT_EQ(t.wire_dispatch_network_bytes, crossings * w.net_rail_slot_bytes(N) +
                                                     (nodes - 1) * chunks * w.ht_flag_bytes + (R - N) * w.ht_ack_bytes)
            << "rank " << rank << " nodes of " << N;
        EXPECT_EQ(t.wire_dispatch_nvlink_bytes,
                  (direct + forwarded) * slot + (N - 1) * nodes * chunks * w.ht_flag_bytes + (N - 1) * w.ht_ack_bytes)
            << "rank " << rank << " nodes of " << N;
        // Logical bytes follow DeepEP's rule whatever the path.
        const RankTraffic flat = compute_traffic(all, rank, tokens, topk, experts, w, 1 << 30);
        EXPECT_EQ(t.logical_dispatch_bytes, flat.logical_dispatch_bytes);
        EXPECT_EQ(t.logical_combine_bytes, flat.logical_combine_bytes);
        // Combine by rail: a rank of this node gets the rows of its own tokens that this rank
        // received and those of every remote source whose rail peer here it is; a remote rail
        // peer one partial slot per token of its own that had rows on this node.
        for (int x = 0; x < R; ++x) {
          if (x == rank) continue;
          int64_t expected = 0;
          for (int tok = 0; tok < tokens; ++tok) {
            for (int src = 0; src < R; ++src) {
              const bool returned_to_x = src / N == own ? src == x : x == own * N + src % N;
              if (returned_to_x && has_entry(src, tok, rank)) expected += w.combine_row_bytes;
            }
            if (x / N != own && x % N == rank % N) {
              bool came = false;
              for (int d = own * N; d < (own + 1) * N; ++d) came = came || has_entry(x, tok, d);
              if (came) expected += w.net_combine_row_bytes;
            }
          }
          EXPECT_EQ(t.combine_to[static_cast<size_t>(x)], expected)
              << "rank " << rank << " to " << x << " nodes of " << N;
        }
        nvlink_payload_all +=
            std::accumulate(t.dispatch_to.begin() + own * N, t.dispatch_to.begin() + (own + 1) * N, int64_t{0});
      }
      if (!w.ht || nodes == 1) continue;
      // Across all ranks, every (token, other destination rank) pair is stored over NVLink
      // exactly once, except when the destination is the source's rail peer itself (it
      // stores into its own window).
      for (int s = 0; s < R; ++s) {
        for (int tok = 0; tok < tokens; ++tok) {
          for (int d = 0; d < R; ++d) {
            const bool rail_peer = d / N != s / N && d % N == s % N;
            if (d != s && !rail_peer && has_entry(s, tok, d)) expected_nvlink_payload_all += slot;
          }
        }
      }
      EXPECT_EQ(nvlink_payload_all, expected_nvlink_payload_all) << "nodes of " << N;
    }
  }
}

// The network sizes are the library's receive slots: what the planner lays out (and the
// group reports as EpcPlan.message_bytes) for LL messages and HT dispatch slots, and the
// planner's rail_recv region for HT rail slots.
TEST(Traffic, NetworkMessagesAreThePlannersSlots) {
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    for (bool fp8 : {false, true}) {
      for (uint32_t topk : {1u, 2u, 8u, 13u}) {
        for (uint32_t hidden : {128u, 7168u}) {
          EpcGroupConfig raw = EPC_GROUP_CONFIG_INIT;
          raw.mode = mode;
          raw.num_experts = 64;
          raw.hidden = hidden;
          raw.max_tokens_per_rank = 64;
          raw.max_topk = topk;
          if (fp8) raw.max_token_bytes = hidden + hidden / 32;  // the fp8-only window
          raw.virtual_node_size = 2;
          const epc::Plan plan = epc::make_plan(epc::resolve_config(&raw), {4, 4, 1});
          const bool ht = mode == EPC_MODE_HIGH_THROUGHPUT;
          const WireFormat w = ht ? WireFormat::for_ht(static_cast<int>(hidden), fp8, static_cast<int>(topk))
                                  : WireFormat::for_dtype(static_cast<int>(hidden), fp8, static_cast<int>(topk));
          EXPECT_EQ(w.net_dispatch_message_bytes, plan.message_bytes)
              << (ht ? "HT" : "LL") << (fp8 ? " fp8" : " bf16") << " top-" << topk << " hidden " << hidden;
          if (ht) {
            // The rail slots: [2 nodes][64 tokens] of them for nodes of 2.
            EXPECT_EQ(static_cast<int64_t>(plan.region(EPC_REGION_RAIL_RECV, EPC_SLOT_NONE).size),
                      2 * 64 * w.net_rail_slot_bytes(2))
                << (fp8 ? "fp8" : "bf16") << " top-" << topk << " hidden " << hidden;
          }
        }
      }
    }
  }
}

TEST(Traffic, NetworkMessagesSizeTheCeilingWindow) {
  const WireFormat ll = WireFormat::for_dtype(8, false, 2);
  EXPECT_EQ(ll.max_bytes_to_peer(10, 2, 4, 2), 10 * 48);
  const WireFormat ht = WireFormat::for_ht(8, false, 2);
  // 4 ranks in nodes of 2: a rail peer gets 10 rail slots of 96 B, the other rank of the node
  // 10 slots of 32 B from this rank and 10 more it forwards (640 B): 960 B.
  EXPECT_EQ(ht.max_bytes_to_peer(10, 2, 4, 2), 10 * 96);
  // 8 ranks in nodes of 2 (4 nodes): the rank of this node gets 4 * 10 slots of 32 B.
  EXPECT_EQ(ht.max_bytes_to_peer(10, 2, 8, 2), 4 * 10 * 32);
  // Nodes of one rank: rail slots only (nobody else in the node to forward to).
  EXPECT_EQ(ht.max_bytes_to_peer(10, 2, 8, 1), 10 * 96);
  EXPECT_EQ(ht.max_bytes_to_peer(10, 2), 10 * 32);
  EXPECT_EQ(ht.max_bytes_to_peer(10, 2, 4, 4), 10 * 32);  // one node
  EXPECT_NE(ht.describe().find("whole slots instead: 32 B per returned row"), std::string::npos) << ht.describe();
  EXPECT_NE(ht.describe().find("the 64 B dispatch slot + 4 B per rank of a node"), std::string::npos) << ht.describe();
  EXPECT_NE(ll.describe().find("whole messages instead: 48 B each"), std::string::npos) << ll.describe();
}

TEST(Traffic, AllMaskedMovesOnlySignalsAndTables) {
  const std::vector<Routing> all = {{-1, -1}, {-1, -1}};
  const RankTraffic t = compute_traffic(all, 0, 1, 2, 4, WireFormat::for_dtype(8, false, 2), 100);
  EXPECT_EQ(t.selections, 0);
  EXPECT_EQ(t.logical_dispatch_bytes, 0);
  EXPECT_EQ(t.wire_dispatch_bytes, 8 + 8);  // signal, count table
  EXPECT_EQ(t.wire_combine_bytes, 8);
}

}  // namespace
}  // namespace epc::bench
