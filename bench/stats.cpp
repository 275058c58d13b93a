// SPDX-License-Identifier: Apache-2.0
#include "bench/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace epc::bench {

Summary summarize(std::vector<double> samples_us) {
  Summary s;
  if (samples_us.empty()) return s;
  std::sort(samples_us.begin(), samples_us.end());
  const double last = static_cast<double>(samples_us.size() - 1);
  auto at = [&](double q) { return samples_us[static_cast<size_t>(std::lround(q * last))]; };
  s.p10_us = at(0.1);
  s.median_us = at(0.5);
  s.p90_us = at(0.9);
  s.samples = static_cast<int>(samples_us.size());
  s.mean_us = std::accumulate(samples_us.begin(), samples_us.end(), 0.0) / static_cast<double>(s.samples);
  return s;
}

AcrossRanks across_ranks(const std::vector<Summary>& per_rank) {
  AcrossRanks a;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    a.per_rank_median_us.push_back(per_rank[r].median_us);
    if (a.slowest_rank < 0 || per_rank[r].median_us > a.slowest.median_us) {
      a.slowest = per_rank[r];
      a.slowest_rank = static_cast<int>(r);
    }
  }
  return a;
}

}  // namespace epc::bench
