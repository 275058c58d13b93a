// SPDX-License-Identifier: Apache-2.0
// Percentiles of one rank's samples, and the slowest rank's figures across ranks. Pure CPU.
#pragma once

#include <vector>

namespace epc::bench {

struct Summary {
  double p10_us = 0;
  double median_us = 0;
  double p90_us = 0;
  int samples = 0;
  // Peers (DeepEP's tests, NCCL EP) report means; the percentiles stay the bench's headline.
  double mean_us = 0;
};

// Nearest-rank percentiles of the sorted samples (index round(q * (n - 1))), so every figure
// is a time that was actually measured, and their mean. An empty sample gives all zeros and
// samples = 0.
Summary summarize(std::vector<double> samples_us);

// The rank whose median is largest, with its own p10/median/p90/mean (a step of a collective is
// as slow as its slowest rank), and every rank's median.
struct AcrossRanks {
  Summary slowest;
  int slowest_rank = -1;
  std::vector<double> per_rank_median_us;
};

AcrossRanks across_ranks(const std::vector<Summary>& per_rank);

}  // namespace epc::bench
