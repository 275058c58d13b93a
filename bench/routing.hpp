// SPDX-License-Identifier: Apache-2.0
// Routing of one benchmark point: which experts each token of each rank picks. Deterministic
// in (seed, rank, tokens), so every rank can compute every other rank's routing without
// communication (the traffic model and the count check need all of it). Pure CPU.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/options.hpp"

namespace epc::bench {

// [tokens, topk] expert ids, -1 for masked entries; no expert appears twice in a row.
using Routing = std::vector<int64_t>;

Routing make_routing(const RoutingSpec& spec, int rank, int tokens, int topk, int experts);

// Every rank's routing for one point, indexed by rank.
std::vector<Routing> make_all_routing(const RoutingSpec& spec, int nranks, int tokens, int topk, int experts);

// A small, portable generator (splitmix64): the same stream on every compiler and library,
// unlike std::uniform_int_distribution.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  uint64_t below(uint64_t n);  // uniform in [0, n), n > 0
  double unit();               // uniform in [0, 1)

 private:
  uint64_t state_;
};

}  // namespace epc::bench
