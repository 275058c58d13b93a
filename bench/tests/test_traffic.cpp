// Byte counts worked out by hand for a tiny routing (2 ranks, 4 experts, top-2, hidden 8).
#include <gtest/gtest.h>

#include "bench/traffic.hpp"

namespace epc::bench {
namespace {

// Rank 0: token 0 -> experts {0, 2}, token 1 -> {1, masked}.
// Rank 1: token 0 -> {3, 2},         token 1 -> {0, 3}.
// Experts 0, 1 live on rank 0; 2, 3 on rank 1.
std::vector<Routing> tiny() { return {{0, 2, 1, -1}, {3, 2, 0, 3}}; }

TEST(Traffic, RankZero) {
  const WireFormat w = WireFormat::for_dtype(8, false);
  ASSERT_EQ(w.dispatch_row_bytes, 16);
  ASSERT_EQ(w.combine_row_bytes, 16);
  const RankTraffic t = compute_traffic(tiny(), 0, 2, 2, 4, w, 100);
  EXPECT_EQ(t.selections, 3);
  EXPECT_EQ(t.logical_dispatch_bytes, 48);
  EXPECT_EQ(t.logical_combine_bytes, 48);
  // To rank 1: token 0 with one entry (8 + 12 + 16), token 1 header only (8).
  EXPECT_EQ(t.dispatch_to, (std::vector<int64_t>{0, 44}));
  // Plus one 8-byte signal and rank 1's count table (2 local experts * 4 bytes).
  EXPECT_EQ(t.wire_dispatch_bytes, 44 + 8 + 8);
  // Back to rank 1: its token 1 had an entry here (expert 0); its token 0 had none.
  EXPECT_EQ(t.combine_to, (std::vector<int64_t>{0, 16}));
  EXPECT_EQ(t.wire_combine_bytes, 24);
  EXPECT_EQ(t.baseline_rows_to, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(t.baseline_rows_from, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(t.baseline_wire_dispatch_bytes, 16 + 2 * 4);  // one row and 2 counts to rank 1
  EXPECT_EQ(t.baseline_wire_combine_bytes, 16);
  EXPECT_EQ(t.expected_counts, (std::vector<int32_t>{2, 1}));
}

TEST(Traffic, RankOne) {
  const WireFormat w = WireFormat::for_dtype(8, false);
  const RankTraffic t = compute_traffic(tiny(), 1, 2, 2, 4, w, 100);
  EXPECT_EQ(t.selections, 4);
  EXPECT_EQ(t.dispatch_to, (std::vector<int64_t>{44, 0}));
  EXPECT_EQ(t.combine_to, (std::vector<int64_t>{16, 0}));
  EXPECT_EQ(t.baseline_rows_to, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(t.baseline_rows_from, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(t.expected_counts, (std::vector<int32_t>{2, 2}));
}

TEST(Traffic, CountsAreCappedAtTheRowCapacity) {
  const RankTraffic t = compute_traffic(tiny(), 1, 2, 2, 4, WireFormat::for_dtype(8, false), 1);
  EXPECT_EQ(t.expected_counts, (std::vector<int32_t>{1, 1}));
}

TEST(Traffic, Fp8RowsCarryScales) {
  const WireFormat w = WireFormat::for_dtype(7168, true);
  EXPECT_EQ(w.dispatch_row_bytes, 7168 + 56 * 4);
  EXPECT_EQ(w.combine_row_bytes, 2 * 7168);
  EXPECT_NE(w.describe().find("7392"), std::string::npos);
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

TEST(Traffic, HighThroughputFp8AndChunks) {
  const WireFormat w = WireFormat::for_ht(7168, true, 8);
  EXPECT_EQ(w.dispatch_row_bytes, 7168 + 56 * 4);
  EXPECT_EQ(w.combine_row_bytes, 2 * 7168);
  EXPECT_NE(w.describe().find("high-throughput"), std::string::npos);
  EXPECT_EQ(w.max_bytes_to_peer(100, 8), 100 * 2 * 7168);  // combine rows are the larger
  EXPECT_EQ(WireFormat::for_ht(7168, false, 8).max_bytes_to_peer(10, 8), 10 * (2 * 7168 + 64));
  // The chunk size is the kernels' (kernels/ht_message.hpp).
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
  const WireFormat w = WireFormat::for_dtype(8, false);
  EXPECT_EQ(w.max_bytes_to_peer(10, 2), 10 * (8 + 2 * 12 + 16));
}

TEST(Traffic, AllMaskedMovesOnlyHeadersAndSignals) {
  const std::vector<Routing> all = {{-1, -1}, {-1, -1}};
  const RankTraffic t = compute_traffic(all, 0, 1, 2, 4, WireFormat::for_dtype(8, false), 100);
  EXPECT_EQ(t.selections, 0);
  EXPECT_EQ(t.logical_dispatch_bytes, 0);
  EXPECT_EQ(t.wire_dispatch_bytes, 8 + 8 + 8);  // header, signal, count table
  EXPECT_EQ(t.wire_combine_bytes, 8);
}

}  // namespace
}  // namespace epc::bench
