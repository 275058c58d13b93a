// SPDX-License-Identifier: Apache-2.0
// The host-side part of the NCCL baseline (bench/nccl_baseline.hpp): from one rank's routing,
// the order in which it packs rows for its peers and where each returned row lands. Computed
// per point outside the timing (which favours the baseline; bench/JSON.md says so). Pure CPU.
//   LL: one row per (token, expert) selection, sorted by expert (so grouped by destination);
//       per-expert counts are exchanged; combine sums a token's K rows with its weights.
//   HT: one row per (token, destination rank), grouped by destination, then token; one count
//       per peer is exchanged; each row carries the token's top-k ids and weights; combine
//       sums a token's returned rows (one per destination, already weighted) in rank order.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/routing.hpp"

namespace epc::bench {

struct BaselinePlan {
  int width = 0;            // columns of pos and weights: K (LL) or R (HT)
  int count_bins = 0;       // bins of the count kernel: E (LL) or R (HT)
  int counts_per_peer = 0;  // counts exchanged with each peer: L (LL) or 1 (HT)
  // What the count kernel histograms: LL the top-k ids [B * K]; HT the destination rank of
  // every packed row.
  std::vector<int32_t> count_input;
  std::vector<int32_t> src_token;  // [rows]: the source token of every packed row
  std::vector<int32_t> pos;        // [B, width]: packed (= returned) row of (token, k or rank), or -1
  std::vector<float> weights;      // [B, width]: LL the top-k weights (1/K); HT 1.0
  std::vector<int32_t> meta;       // HT: [B, 2K] top-k ids, then the weights' bits; LL empty

  int rows() const { return static_cast<int>(src_token.size()); }
};

BaselinePlan ll_baseline_plan(const Routing& routing, int tokens, int topk, int experts, int nranks);
BaselinePlan ht_baseline_plan(const Routing& routing, int tokens, int topk, int experts, int nranks);

}  // namespace epc::bench
