// SPDX-License-Identifier: Apache-2.0
#include "bench/routing.hpp"

#include <utility>

namespace epc::bench {

uint64_t Rng::next() {
  state_ += 0x9E3779B97F4A7C15ull;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rng::below(uint64_t n) {
  // Rejection keeps the draw unbiased for any n.
  const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % n);
  uint64_t v;
  do {
    v = next();
  } while (v >= limit);
  return v % n;
}

double Rng::unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

Routing make_routing(const RoutingSpec& spec, int rank, int tokens, int topk, int experts) {
  // Distinct streams per (seed, rank, tokens): a sweep's points do not share routing.
  Rng rng(spec.seed * 0x100000001B3ull ^ (static_cast<uint64_t>(rank) << 32) ^ static_cast<uint64_t>(tokens));
  Routing routing(static_cast<size_t>(tokens) * topk);
  std::vector<int64_t> pool(static_cast<size_t>(experts));
  for (int t = 0; t < tokens; ++t) {
    for (int e = 0; e < experts; ++e) pool[static_cast<size_t>(e)] = e;
    int64_t* row = &routing[static_cast<size_t>(t) * topk];
    int first = 0;  // pool[0, first) is taken
    int hot_slot = -1;
    if (spec.kind == RoutingKind::skewed && rng.unit() < spec.hot_share) {
      hot_slot = static_cast<int>(rng.below(static_cast<uint64_t>(topk)));
      std::swap(pool[0], pool[static_cast<size_t>(spec.hot_expert)]);
      first = 1;
    }
    // Partial Fisher-Yates over what is left: k distinct experts.
    for (int k = 0; k < topk; ++k) {
      if (k == hot_slot) {
        row[k] = spec.hot_expert;
        continue;
      }
      const int pick = first + static_cast<int>(rng.below(static_cast<uint64_t>(experts - first)));
      std::swap(pool[static_cast<size_t>(first)], pool[static_cast<size_t>(pick)]);
      row[k] = pool[static_cast<size_t>(first)];
      ++first;
    }
    for (int k = 0; k < topk; ++k) {
      if (spec.masked > 0 && rng.unit() < spec.masked) row[k] = -1;
    }
  }
  return routing;
}

std::vector<Routing> make_all_routing(const RoutingSpec& spec, int nranks, int tokens, int topk, int experts) {
  std::vector<Routing> all;
  for (int r = 0; r < nranks; ++r) all.push_back(make_routing(spec, r, tokens, topk, experts));
  return all;
}

}  // namespace epc::bench
