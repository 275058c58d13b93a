// SPDX-License-Identifier: Apache-2.0
#include "bench/baseline_plan.hpp"

#include <algorithm>
#include <cstring>

namespace epc::bench {

BaselinePlan ll_baseline_plan(const Routing& routing, int tokens, int topk, int experts, int nranks) {
  BaselinePlan p;
  p.width = topk;
  p.count_bins = experts;
  p.counts_per_peer = experts / nranks;
  const size_t n = static_cast<size_t>(tokens) * topk;
  p.count_input.resize(n);
  for (size_t i = 0; i < n; ++i) p.count_input[i] = static_cast<int32_t>(routing[i]);
  // Selections sorted by expert (so grouped by destination), then token.
  std::vector<int32_t> entries;
  for (size_t i = 0; i < n; ++i) {
    if (routing[i] >= 0) entries.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(entries.begin(), entries.end(), [&](int32_t a, int32_t b) {
    return routing[static_cast<size_t>(a)] < routing[static_cast<size_t>(b)];
  });
  p.src_token.resize(entries.size());
  p.pos.assign(n, -1);
  for (size_t j = 0; j < entries.size(); ++j) {
    p.src_token[j] = entries[j] / topk;
    p.pos[static_cast<size_t>(entries[j])] = static_cast<int32_t>(j);
  }
  p.weights.assign(n, 1.0f / static_cast<float>(topk));
  return p;
}

BaselinePlan ht_baseline_plan(const Routing& routing, int tokens, int topk, int experts, int nranks) {
  BaselinePlan p;
  p.width = nranks;
  p.count_bins = nranks;
  p.counts_per_peer = 1;
  const int L = experts / nranks;
  const float weight = 1.0f / static_cast<float>(topk);
  // hosts[t * R + d]: token t has an unmasked entry on rank d.
  std::vector<char> hosts(static_cast<size_t>(tokens) * nranks, 0);
  p.meta.resize(static_cast<size_t>(tokens) * 2 * topk);
  for (int t = 0; t < tokens; ++t) {
    for (int k = 0; k < topk; ++k) {
      const int64_t e = routing[static_cast<size_t>(t) * topk + k];
      if (e >= 0) hosts[static_cast<size_t>(t) * nranks + static_cast<size_t>(e / L)] = 1;
      int32_t* meta = &p.meta[static_cast<size_t>(t) * 2 * topk];
      meta[k] = static_cast<int32_t>(e);
      std::memcpy(&meta[topk + k], &weight, sizeof weight);
    }
  }
  p.pos.assign(static_cast<size_t>(tokens) * nranks, -1);
  for (int d = 0; d < nranks; ++d) {
    for (int t = 0; t < tokens; ++t) {
      if (!hosts[static_cast<size_t>(t) * nranks + d]) continue;
      p.pos[static_cast<size_t>(t) * nranks + d] = static_cast<int32_t>(p.src_token.size());
      p.src_token.push_back(t);
      p.count_input.push_back(d);
    }
  }
  p.weights.assign(static_cast<size_t>(tokens) * nranks, 1.0f);
  return p;
}

}  // namespace epc::bench
