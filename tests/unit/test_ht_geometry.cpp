// SPDX-License-Identifier: Apache-2.0
// How the high-throughput kernels deal their streams (kernels/wire/ht_params.hpp): combine's
// senders must serve every source whose rows leave this rank exactly once and no other
// (a source missed loses rows, one served twice writes them twice), for every node shape.
#include <gtest/gtest.h>

#include <set>

#include "kernels/wire/ht_params.hpp"

namespace {

using epc::kernels::HtGeometry;
using epc::kernels::ring_member_after;

HtGeometry geometry(int nranks, int node_size, int rank) {
  HtGeometry g{};
  g.nranks = nranks;
  g.rank = rank;
  g.node_size = node_size;
  g.num_nodes = nranks / node_size;
  return g;
}

TEST(HtGeometry, RingMembersAfterAreEveryOtherMemberOnceStartingAfterMe) {
  for (int n = 1; n <= 9; ++n) {
    for (int me = 0; me < n; ++me) {
      std::set<int> seen;
      for (int k = 0; k < n - 1; ++k) seen.insert(ring_member_after(me, k, n));
      EXPECT_EQ(seen.size(), static_cast<size_t>(n - 1));
      EXPECT_EQ(seen.count(me), 0u);
      if (n > 1) {
        EXPECT_EQ(ring_member_after(me, 0, n), (me + 1) % n);
      }
    }
  }
}

TEST(HtGeometry, CombineSendsForEverySourceOffThisRanksRailExactlyOnce) {
  const int shapes[][2] = {{2, 2}, {3, 3}, {4, 4}, {4, 2}, {4, 1}, {2, 1}, {8, 4}, {8, 2}, {6, 3}, {12, 4}};
  for (const auto& shape : shapes) {
    const int nranks = shape[0], node_size = shape[1];
    for (int rank = 0; rank < nranks; ++rank) {
      const HtGeometry g = geometry(nranks, node_size, rank);
      std::set<int> expected;
      for (int s = 0; s < nranks; ++s) {
        if (s % node_size != rank % node_size) expected.insert(s);
      }
      std::multiset<int> served;
      for (int k = 0; k < g.combine_send_streams(); ++k) served.insert(g.combine_send_source(k));
      EXPECT_EQ(served, std::multiset<int>(expected.begin(), expected.end()))
          << nranks << " ranks in nodes of " << node_size << ", rank " << rank;
      // Consecutive streams go to different targets (a target is named by its local index).
      for (int k = 0; k + 1 < g.combine_send_streams() && k + 1 < node_size - 1; ++k) {
        EXPECT_NE(g.combine_send_source(k) % node_size, g.combine_send_source(k + 1) % node_size);
      }
    }
  }
}

}  // namespace
