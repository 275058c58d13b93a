// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "bench/stats.hpp"

namespace epc::bench {
namespace {

TEST(Stats, NearestRankPercentiles) {
  const Summary s = summarize({5, 1, 3, 2, 4});
  EXPECT_EQ(s.p10_us, 1);
  EXPECT_EQ(s.median_us, 3);
  EXPECT_EQ(s.p90_us, 5);
  EXPECT_EQ(s.samples, 5);
  EXPECT_EQ(s.mean_us, 3);
  std::vector<double> ten;
  for (int i = 10; i >= 1; --i) ten.push_back(i);
  const Summary t = summarize(ten);
  EXPECT_EQ(t.p10_us, 2);
  EXPECT_EQ(t.median_us, 6);
  EXPECT_EQ(t.p90_us, 9);
  EXPECT_EQ(t.mean_us, 5.5);
  // A long tail moves the mean, never the median.
  const Summary tail = summarize({1, 1, 1, 1, 16});
  EXPECT_EQ(tail.median_us, 1);
  EXPECT_EQ(tail.mean_us, 4);
}

TEST(Stats, EmptyAndSingle) {
  EXPECT_EQ(summarize({}).samples, 0);
  EXPECT_EQ(summarize({}).mean_us, 0);
  const Summary one = summarize({7.5});
  EXPECT_EQ(one.p10_us, 7.5);
  EXPECT_EQ(one.median_us, 7.5);
  EXPECT_EQ(one.p90_us, 7.5);
  EXPECT_EQ(one.mean_us, 7.5);
}

TEST(Stats, SlowestRankByMedian) {
  Summary a{1, 10, 50, 3, 20}, b{8, 12, 13, 3, 11}, c{2, 11, 90, 3, 34};
  const AcrossRanks x = across_ranks({a, b, c});
  EXPECT_EQ(x.slowest_rank, 1);
  EXPECT_EQ(x.slowest.median_us, 12);
  EXPECT_EQ(x.slowest.p90_us, 13);   // that rank's own p90, not the largest one
  EXPECT_EQ(x.slowest.mean_us, 11);  // and its own mean
  EXPECT_EQ(x.per_rank_median_us, (std::vector<double>{10, 12, 11}));
}

}  // namespace
}  // namespace epc::bench
