// SPDX-License-Identifier: Apache-2.0
#include "bench/ht_capacity_check.hpp"

#include <exception>

#include "tests/reference/reference.hpp"

namespace epc::bench {
namespace {

// The model's rows are this wide; the bench's values are the same in every channel.
constexpr int kModelHidden = 8;
constexpr uint16_t kBf16One = 0x3F80;

ref::Problem model_problem(const std::vector<Routing>& all, int tokens, int topk, int experts) {
  ref::Problem p;
  p.nranks = static_cast<int>(all.size());
  p.num_experts = experts;
  p.hidden = kModelHidden;
  p.topk = topk;
  p.max_tokens = tokens;
  p.ranks.resize(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    ref::RankTokens& rank = p.ranks[r];
    rank.num_tokens = tokens;
    rank.topk_idx = all[r];
    rank.topk_weights.assign(all[r].size(), 1.0f / static_cast<float>(topk));
    rank.x.assign(static_cast<size_t>(tokens) * kModelHidden, kBf16One);
  }
  return p;
}

}  // namespace

bool expect_ht_capacity(const std::vector<Routing>& all, int rank, int tokens, int topk, int experts, int64_t capacity,
                        HtCapacityExpectation& out, std::string& error) {
  try {
    const ref::Problem p = model_problem(all, tokens, topk, experts);
    ref::HtDispatchOptions options;
    options.capacity = capacity;
    const std::vector<ref::HtDispatchResult> received = ref::ht_dispatch(p, options);
    // Combine returns every kept row as 1.0 (the bench's combine input).
    std::vector<std::vector<uint16_t>> rows(received.size());
    for (size_t q = 0; q < received.size(); ++q) {
      rows[q].assign(static_cast<size_t>(received[q].rows) * kModelHidden, kBf16One);
    }
    const ref::HtCombineResult combined = ref::ht_combine(p, rows, {}, 0, capacity);
    const ref::HtOverflow overflow = ref::ht_overflow_seen_by(ref::ht_layout(p, capacity), rank);
    const ref::HtDispatchResult& mine = received[static_cast<size_t>(rank)];
    HtCapacityExpectation e;
    e.arrived = mine.num_recv;
    e.kept = mine.rows;
    e.expert_counts = mine.expert_counts;
    e.combined.resize(static_cast<size_t>(tokens));
    const std::vector<uint16_t>& x = combined.x[static_cast<size_t>(rank)];
    for (int t = 0; t < tokens; ++t)
      e.combined[static_cast<size_t>(t)] = ref::bf16_to_float(x[static_cast<size_t>(t) * kModelHidden]);
    e.overflow_rank = overflow.rank;
    e.overflow_rows = overflow.rows;
    out = std::move(e);
    return true;
  } catch (const std::exception& ex) {
    error = std::string("the reference model refused the point: ") + ex.what();
    return false;
  }
}

bool ht_dropped_rows(const std::vector<Routing>& all, int tokens, int topk, int experts, int64_t capacity,
                     std::vector<int64_t>& dropped, std::string& error) {
  dropped.assign(all.size(), 0);
  if (capacity <= 0) return true;
  try {
    const ref::HtLayout layout = ref::ht_layout(model_problem(all, tokens, topk, experts), capacity);
    for (size_t q = 0; q < all.size(); ++q) dropped[q] = layout.num_recv[q] - layout.rows[q];
    return true;
  } catch (const std::exception& ex) {
    error = std::string("the reference model refused the point: ") + ex.what();
    return false;
  }
}

}  // namespace epc::bench
