// SPDX-License-Identifier: Apache-2.0
// The row EXPERT_PACKED dispatch gives an entry (packed_row_of, kernels/ht/ht_packed_rows.cuh),
// on one GPU without NCCL, against the zones' definition: zone l holds local expert l's rows,
// sources ascending and each source's entries in place order, and a source's entries for this
// rank come in (local expert, ...) order, so place q of source s is in the zone of the expert
// whose entries span it. Every place of every source is searched; this rank's own places are
// also given their expert, as a rank's own tokens are, which reads the block's shared copy of
// the own zone shifts up to kPackedSharedExperts local experts and the handle's arrays past
// it. Empty experts and empty sources included. A rank receives peers' entries only with two
// or more GPUs, so on one GPU this test is what runs the search.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tests/gpu/parts/packed_rows_run.hpp"

namespace epc::gputest::parts {
namespace {

struct Geometry {
  int ranks, local_experts, max_count, alignment;
  double empty_share;  // share of (source, expert) pairs with no entries
  uint32_t seed;
};

struct Expected {
  PackedRowsInput input;
  std::vector<int32_t> rows;
};

Expected build(const Geometry& g) {
  std::mt19937 random(g.seed);
  const int R = g.ranks, L = g.local_experts;
  std::vector<int> count(static_cast<size_t>(R) * L);
  std::uniform_int_distribution<int> counts(1, g.max_count);
  std::bernoulli_distribution empty(g.empty_share);
  for (int& c : count) c = empty(random) ? 0 : counts(random);

  Expected e;
  PackedRowsInput& in = e.input;
  in.ranks = R;
  in.rank = static_cast<int>(random() % R);
  in.local_experts = L;
  in.source_starts.assign(static_cast<size_t>(R) * (L + 1), 0);
  in.expert_base.assign(static_cast<size_t>(R) * L, 0);
  for (int s = 0; s < R; ++s) {
    for (int l = 0; l < L; ++l) {
      in.source_starts[s * (L + 1) + l + 1] = in.source_starts[s * (L + 1) + l] + count[s * L + l];
    }
  }
  int zone = 0;  // zone l's first row: the zones before it, each rounded up to the alignment
  for (int l = 0; l < L; ++l) {
    int row = zone;
    for (int s = 0; s < R; ++s) {
      in.expert_base[s * L + l] = row;
      row += count[s * L + l];
    }
    zone += (row - zone + g.alignment - 1) / g.alignment * g.alignment;
  }
  // Every place of every source, walked expert by expert: its row is the expert's zone base
  // for that source plus the place's offset among the source's entries of that expert.
  for (int s = 0; s < R; ++s) {
    for (int l = 0; l < L; ++l) {
      for (int i = 0; i < count[s * L + l]; ++i) {
        const int place = in.source_starts[s * (L + 1) + l] + i;
        const int row = in.expert_base[s * L + l] + i;
        in.queries.push_back({s, place, -1});
        e.rows.push_back(row);
        if (s == in.rank) {
          in.queries.push_back({s, place, l});
          e.rows.push_back(row);
        }
      }
    }
  }
  return e;
}

std::string label(const Geometry& g) {
  return std::to_string(g.ranks) + " ranks, " + std::to_string(g.local_experts) + " local experts, alignment " +
         std::to_string(g.alignment) + ", seed " + std::to_string(g.seed);
}

void check(const Geometry& g, bool shifts_in_shared) {
  const Expected e = build(g);
  ASSERT_FALSE(e.rows.empty()) << label(g);
  const PackedRowsResult r = run_packed_rows(e.input);
  ASSERT_TRUE(r.cuda_error.empty()) << label(g) << ": " << r.cuda_error;
  EXPECT_EQ(r.shifts_in_shared, shifts_in_shared) << label(g);
  ASSERT_EQ(r.rows.size(), e.rows.size()) << label(g);
  int wrong = 0;
  for (size_t i = 0; i < e.rows.size(); ++i) {
    if (r.rows[i] == e.rows[i]) continue;
    if (++wrong <= 5) {
      const PackedRowQuery& q = e.input.queries[i];
      ADD_FAILURE() << label(g) << ": source " << q.source << " place " << q.place << " (known expert " << q.known_l
                    << "): row " << r.rows[i] << ", expected " << e.rows[i];
    }
  }
  EXPECT_EQ(wrong, 0) << label(g) << ": " << wrong << " of " << e.rows.size() << " rows wrong";
}

TEST(PackedRows, EveryEntryGetsItsRow) {
  check({1, 256, 8, 128, 0.2, 1}, true);
  check({2, 128, 5, 1, 0.3, 2}, true);
  check({8, 32, 4, 16, 0.5, 3}, true);
  check({8, 1, 6, 4, 0.0, 4}, true);
  check({64, 4, 3, 1, 0.4, 5}, true);
  check({2, 2048, 2, 128, 0.6, 6}, true);  // the most local experts whose shifts fit
}

TEST(PackedRows, MoreLocalExpertsReadTheHandleArrays) {
  check({2, 2049, 2, 128, 0.6, 7}, false);  // one past what fits
  check({1, 6000, 2, 1, 0.5, 8}, false);
}

TEST(PackedRows, ManyBlocksEachLoadTheirCopy) {
  for (uint32_t seed = 10; seed < 14; ++seed) check({8, 32, 8, 128, 0.1, seed}, true);
}

}  // namespace
}  // namespace epc::gputest::parts
