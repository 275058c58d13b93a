// SPDX-License-Identifier: Apache-2.0
// High-throughput steps in parts (core/ht/ht_parts.hpp): every part is a step of its own over
// tokens [k * P, (k + 1) * P) of each rank, and its rows are then placed as
// kernels/ht/ht_parts.cu places them. FLAT: part k's rows from source s behind the rows s
// sent in parts 0 .. k - 1, all of s's rows behind those of lower sources. EXPERT_PACKED: the
// whole step's aligned zones, and in zone l part k's rows from source s behind s's rows of l
// in the parts before, behind those of lower sources. The parts, placed so, give
// ref::ht_dispatch (ref::ht_dispatch_packed) of the whole step row for row (payload, source,
// entries or weights, counts, zones), and their combines, each fed the rows its part placed,
// give the whole step's combine bit for bit, across nodes (node_size) as on one: the bitwise
// contract the GPU runs of steps in parts rely on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tests/reference/numeric.hpp"
#include "tests/reference/problem_gen.hpp"
#include "tests/reference/reference.hpp"
#include "tests/reference/reference_ht_packed.hpp"

namespace {

using epc::ref::HtDispatchResult;
using epc::ref::Problem;

// Tokens [begin, begin + P) of every rank of `whole`, as a step of their own.
Problem part_of(const Problem& whole, int begin, int P) {
  Problem part = whole;
  part.max_tokens = P;
  const size_t H = static_cast<size_t>(whole.hidden), K = static_cast<size_t>(whole.topk);
  for (size_t r = 0; r < whole.ranks.size(); ++r) {
    const epc::ref::RankTokens& from = whole.ranks[r];
    epc::ref::RankTokens& to = part.ranks[r];
    const int first = std::min(begin, from.num_tokens), end = std::min(begin + P, from.num_tokens);
    to.num_tokens = end - first;
    to.x.assign(from.x.begin() + first * H, from.x.begin() + end * H);
    to.topk_idx.assign(from.topk_idx.begin() + first * K, from.topk_idx.begin() + end * K);
    to.topk_weights.assign(from.topk_weights.begin() + first * K, from.topk_weights.begin() + end * K);
  }
  return part;
}

struct Shape {
  int nranks, node_size, max_tokens, part_tokens;
  bool random_counts;
};

// The whole step of a case: hidden 8, top-3, two experts per rank, a fifth of entries masked.
Problem whole_problem(const Shape& shape, uint64_t seed) {
  epc::ref::ProblemGenOptions o;
  o.nranks = shape.nranks;
  o.num_experts = 2 * shape.nranks;
  o.hidden = 8;
  o.topk = 3;
  o.max_tokens = shape.max_tokens;
  o.seed = seed;
  o.masked_fraction = 0.2;
  o.random_token_counts = shape.random_counts;
  return epc::ref::make_random_problem(o);
}

// Combine inputs of rows[q] rows on each rank q, far apart in magnitude, so that a changed
// summation order shows.
std::vector<std::vector<uint16_t>> combine_inputs(const std::vector<int>& rows, int H, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-14, 14);
  std::vector<std::vector<uint16_t>> in(rows.size());
  for (size_t q = 0; q < rows.size(); ++q) {
    in[q].resize(static_cast<size_t>(rows[q]) * H);
    for (uint16_t& b : in[q]) b = epc::ref::float_to_bf16(std::ldexp(mantissa(rng), exponent(rng)));
  }
  return in;
}

void check(const Shape& shape, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << shape.nranks << " ranks in nodes of " << shape.node_size << ", T "
                                  << shape.max_tokens << ", parts of " << shape.part_tokens << ", seed " << seed);
  const Problem whole = whole_problem(shape, seed);
  const int R = shape.nranks, H = whole.hidden, K = whole.topk, P = shape.part_tokens;
  const std::vector<HtDispatchResult> want = epc::ref::ht_dispatch(whole);
  std::vector<int> rows(R);
  for (int q = 0; q < R; ++q) rows[q] = want[q].rows;
  const std::vector<std::vector<uint16_t>> combine_in = combine_inputs(rows, H, seed);
  const int node_size = shape.node_size < R ? shape.node_size : 0;
  const auto combined = epc::ref::ht_combine(whole, combine_in, {}, node_size);

  const int parts = (shape.max_tokens + P - 1) / P;
  std::vector<Problem> problems;
  std::vector<std::vector<HtDispatchResult>> got;
  for (int k = 0; k < parts; ++k) {
    problems.push_back(part_of(whole, k * P, P));
    got.push_back(epc::ref::ht_dispatch(problems.back()));
  }
  // place[k][q][i]: the row of the whole step part k's row i on rank q goes to, as
  // kernels/ht/ht_parts.cu places it: where each source's rows start in the step, and where
  // each part's start among them.
  std::vector<std::vector<std::vector<int>>> place(parts, std::vector<std::vector<int>>(R));
  for (int q = 0; q < R; ++q) {
    std::vector<int> source_base(R + 1, 0);
    for (int s = 0; s < R; ++s) {
      int rows = 0;
      for (int k = 0; k < parts; ++k) rows += got[k][q].tokens_from_rank[s];
      source_base[s + 1] = source_base[s] + rows;
    }
    ASSERT_EQ(source_base[R], want[q].rows);
    std::vector<int> before(R, 0);  // each source's rows in the parts so far
    for (int k = 0; k < parts; ++k) {
      for (int s = 0; s < R; ++s) {
        for (int j = 0; j < got[k][q].tokens_from_rank[s]; ++j) place[k][q].push_back(source_base[s] + before[s] + j);
        before[s] += got[k][q].tokens_from_rank[s];
      }
    }
  }
  for (int q = 0; q < R; ++q) {
    SCOPED_TRACE(testing::Message() << "rank " << q);
    std::vector<bool> placed(want[q].rows, false);
    std::vector<int32_t> expert_counts(want[q].expert_counts.size(), 0);
    for (int k = 0; k < parts; ++k) {
      const HtDispatchResult& g = got[k][q];
      ASSERT_EQ(place[k][q].size(), static_cast<size_t>(g.rows));
      for (int i = 0; i < g.rows; ++i) {
        const int row = place[k][q][i];
        ASSERT_LT(row, want[q].rows);
        EXPECT_FALSE(placed[row]) << "row " << row << " placed twice";
        placed[row] = true;
        EXPECT_EQ(g.src[i].src_rank, want[q].src[row].src_rank);
        EXPECT_EQ(g.src[i].src_token + k * P, want[q].src[row].src_token);
        EXPECT_TRUE(std::equal(g.x.begin() + i * H, g.x.begin() + (i + 1) * H, want[q].x.begin() + row * H));
        for (int e = 0; e < K; ++e) {
          EXPECT_EQ(g.recv_topk_idx[i * K + e], want[q].recv_topk_idx[row * K + e]);
          EXPECT_EQ(g.recv_topk_weights[i * K + e], want[q].recv_topk_weights[row * K + e]);
        }
      }
      for (size_t l = 0; l < expert_counts.size(); ++l) expert_counts[l] += g.expert_counts[l];
    }
    EXPECT_EQ(std::count(placed.begin(), placed.end(), false), 0);
    EXPECT_EQ(expert_counts, want[q].expert_counts);
  }
  // Each part's combine, fed on every rank the rows its part placed, sums its tokens as the
  // whole step's combine does.
  for (int k = 0; k < parts; ++k) {
    std::vector<std::vector<uint16_t>> in(R);
    for (int q = 0; q < R; ++q) {
      for (int row : place[k][q]) {
        in[q].insert(in[q].end(), combine_in[q].begin() + row * H, combine_in[q].begin() + (row + 1) * H);
      }
    }
    const auto part = epc::ref::ht_combine(problems[k], in, {}, node_size);
    for (int r = 0; r < R; ++r) {
      const size_t first = static_cast<size_t>(std::min(k * P, whole.ranks[r].num_tokens)) * H;
      ASSERT_LE(first + part.x[r].size(), combined.x[r].size());
      EXPECT_TRUE(std::equal(part.x[r].begin(), part.x[r].end(), combined.x[r].begin() + first))
          << "part " << k << ", source rank " << r;
    }
  }
}

// EXPERT_PACKED: as check(), with zones.
void check_packed(const Shape& shape, int alignment, bool weighted, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "EXPERT_PACKED, " << shape.nranks << " ranks in nodes of " << shape.node_size
                                  << ", T " << shape.max_tokens << ", parts of " << shape.part_tokens << ", alignment "
                                  << alignment << (weighted ? ", weighted" : "") << ", seed " << seed);
  const Problem whole = whole_problem(shape, seed);
  const int R = shape.nranks, H = whole.hidden, L = whole.local_experts(), P = shape.part_tokens;
  epc::ref::HtPackedOptions options;
  options.alignment = alignment;
  const std::vector<epc::ref::HtPackedResult> want = epc::ref::ht_dispatch_packed(whole, options);
  std::vector<int> rows(R);
  for (int q = 0; q < R; ++q) rows[q] = want[q].rows;
  const std::vector<std::vector<uint16_t>> combine_in = combine_inputs(rows, H, seed);
  const int node_size = shape.node_size < R ? shape.node_size : 0;
  const auto combined = epc::ref::ht_combine_packed(whole, combine_in, weighted, alignment, {}, node_size);

  const int parts = (shape.max_tokens + P - 1) / P;
  std::vector<Problem> problems;
  std::vector<std::vector<epc::ref::HtPackedResult>> got;
  for (int k = 0; k < parts; ++k) {
    problems.push_back(part_of(whole, k * P, P));
    got.push_back(epc::ref::ht_dispatch_packed(problems.back(), options));
  }
  // place[k][q][row of part k] (-1 for its padding): the row of the whole step it goes to.
  std::vector<std::vector<std::vector<int>>> place(parts, std::vector<std::vector<int>>(R));
  for (int q = 0; q < R; ++q) {
    SCOPED_TRACE(testing::Message() << "rank " << q);
    // rows[k][s][l]: part k's entries of source s in zone l.
    std::vector<std::vector<std::vector<int>>> rows(parts, std::vector<std::vector<int>>(R, std::vector<int>(L, 0)));
    std::vector<int> totals(L, 0);
    for (int k = 0; k < parts; ++k) {
      for (int l = 0; l < L; ++l) {
        totals[l] += got[k][q].expert_counts[l];
        for (int i = 0; i < got[k][q].expert_counts[l]; ++i) {
          ++rows[k][got[k][q].src[got[k][q].expert_offsets[l] + i].src_rank][l];
        }
      }
    }
    std::vector<int64_t> zones(L + 1, 0);
    for (int l = 0; l < L; ++l) zones[l + 1] = zones[l] + epc::ref::ht_packed_zone_rows(totals[l], alignment);
    EXPECT_EQ(zones, want[q].expert_offsets);
    EXPECT_EQ(totals, want[q].expert_counts);
    std::vector<bool> placed(want[q].rows, false);
    for (int k = 0; k < parts; ++k) {
      const epc::ref::HtPackedResult& g = got[k][q];
      place[k][q].assign(g.rows, -1);
      for (int l = 0; l < L; ++l) {
        int64_t base = zones[l];
        int i = 0;  // part k's rows of zone l come in source order
        for (int s = 0; s < R; ++s) {
          int before = 0;  // s's rows of l in the parts before k
          for (int j = 0; j < k; ++j) before += rows[j][s][l];
          for (int n = 0; n < rows[k][s][l]; ++n, ++i)
            place[k][q][g.expert_offsets[l] + i] = static_cast<int>(base + before + n);
          for (int j = 0; j < parts; ++j) base += rows[j][s][l];
        }
      }
      for (int i = 0; i < g.rows; ++i) {
        const int row = place[k][q][i];
        if (row < 0) continue;  // padding of the part's own zones
        ASSERT_LT(row, want[q].rows);
        EXPECT_FALSE(placed[row]) << "row " << row << " placed twice";
        placed[row] = true;
        EXPECT_EQ(g.src[i].src_rank, want[q].src[row].src_rank);
        EXPECT_EQ(g.src[i].src_token + k * P, want[q].src[row].src_token);
        EXPECT_EQ(g.src[i].topk_slot, want[q].src[row].topk_slot);
        EXPECT_EQ(g.weights[i], want[q].weights[row]);
        EXPECT_TRUE(std::equal(g.payload.begin() + i * g.row_bytes, g.payload.begin() + (i + 1) * g.row_bytes,
                               want[q].payload.begin() + row * want[q].row_bytes));
      }
    }
    for (int l = 0; l < L; ++l) {
      for (int64_t row = zones[l]; row < zones[l] + totals[l]; ++row) EXPECT_TRUE(placed[row]) << "row " << row;
    }
  }
  for (int k = 0; k < parts; ++k) {
    std::vector<std::vector<uint16_t>> in(R);
    for (int q = 0; q < R; ++q) {
      in[q].assign(static_cast<size_t>(got[k][q].rows) * H, 0);
      for (int i = 0; i < got[k][q].rows; ++i) {
        const int row = place[k][q][i];
        if (row >= 0)
          std::copy(combine_in[q].begin() + row * H, combine_in[q].begin() + (row + 1) * H, in[q].begin() + i * H);
      }
    }
    const auto part = epc::ref::ht_combine_packed(problems[k], in, weighted, alignment, {}, node_size);
    for (int r = 0; r < R; ++r) {
      const size_t first = static_cast<size_t>(std::min(k * P, whole.ranks[r].num_tokens)) * H;
      ASSERT_LE(first + part.x[r].size(), combined.x[r].size());
      EXPECT_TRUE(std::equal(part.x[r].begin(), part.x[r].end(), combined.x[r].begin() + first))
          << "part " << k << ", source rank " << r;
    }
  }
}

TEST(HtParts, PlacedPartsAreTheWholeStep) {
  const Shape shapes[] = {
      {4, 2, 7, 1, false}, {4, 2, 7, 3, true}, {4, 2, 8, 4, false}, {6, 2, 9, 2, true},
      {8, 4, 11, 5, true}, {4, 4, 6, 4, true}, {4, 1, 5, 2, true},  {8, 2, 7, 7, false},
  };
  for (const Shape& shape : shapes) {
    for (uint64_t seed = 1; seed <= 4; ++seed) check(shape, seed * 7 + static_cast<uint64_t>(shape.part_tokens));
  }
}

TEST(HtParts, PlacedExpertPackedPartsAreTheWholeStep) {
  const Shape shapes[] = {{4, 2, 7, 3, true}, {6, 2, 9, 2, true}, {8, 4, 11, 5, true}, {4, 1, 5, 2, true}};
  for (const Shape& shape : shapes) {
    for (int alignment : {1, 4}) {
      for (bool weighted : {false, true}) {
        for (uint64_t seed = 1; seed <= 3; ++seed) {
          check_packed(shape, alignment, weighted, seed * 11 + static_cast<uint64_t>(shape.part_tokens));
        }
      }
    }
  }
}

}  // namespace
