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
