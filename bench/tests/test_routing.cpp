// SPDX-License-Identifier: Apache-2.0
// Routing: deterministic, distinct experts per token, and the skew and mask it promises.
#include <gtest/gtest.h>

#include <set>

#include "bench/routing.hpp"

namespace epc::bench {
namespace {

TEST(Routing, DeterministicAndDistinctPerRankAndPoint) {
  RoutingSpec spec;
  const Routing a = make_routing(spec, 0, 64, 8, 256);
  EXPECT_EQ(a, make_routing(spec, 0, 64, 8, 256));
  EXPECT_NE(a, make_routing(spec, 1, 64, 8, 256));
  spec.seed = 2;
  EXPECT_NE(a, make_routing(spec, 0, 64, 8, 256));
}

TEST(Routing, UniformPicksDistinctExpertsInRangeAndCoversThem) {
  RoutingSpec spec;
  const int tokens = 1024, k = 8, experts = 256;
  const Routing r = make_routing(spec, 3, tokens, k, experts);
  ASSERT_EQ(r.size(), static_cast<size_t>(tokens) * k);
  std::vector<int> hits(experts, 0);
  for (int t = 0; t < tokens; ++t) {
    std::set<int64_t> seen;
    for (int j = 0; j < k; ++j) {
      const int64_t e = r[static_cast<size_t>(t) * k + j];
      ASSERT_GE(e, 0);
      ASSERT_LT(e, experts);
      EXPECT_TRUE(seen.insert(e).second) << "token " << t << " picks expert " << e << " twice";
      hits[static_cast<size_t>(e)]++;
    }
  }
  // 32 picks per expert on average; a uniform draw keeps every expert well inside [8, 64].
  for (int e = 0; e < experts; ++e) {
    EXPECT_GT(hits[static_cast<size_t>(e)], 8) << e;
    EXPECT_LT(hits[static_cast<size_t>(e)], 64) << e;
  }
}

TEST(Routing, TopkEqualToExpertsUsesEveryExpert) {
  RoutingSpec spec;
  const Routing r = make_routing(spec, 0, 4, 16, 16);
  for (int t = 0; t < 4; ++t) {
    std::set<int64_t> seen(r.begin() + t * 16, r.begin() + (t + 1) * 16);
    EXPECT_EQ(seen.size(), 16u);
  }
}

TEST(Routing, SkewedSendsTheGivenShareToTheHotExpert) {
  RoutingSpec spec;
  spec.kind = RoutingKind::skewed;
  spec.hot_expert = 17;
  spec.hot_share = 0.6;
  const int tokens = 4000, k = 8;
  const Routing r = make_routing(spec, 0, tokens, k, 256);
  int with_hot = 0;
  for (int t = 0; t < tokens; ++t) {
    std::set<int64_t> seen;
    for (int j = 0; j < k; ++j) {
      const int64_t e = r[static_cast<size_t>(t) * k + j];
      EXPECT_TRUE(seen.insert(e).second);
      if (e == 17) with_hot++;
    }
  }
  // Expected 0.6 + 0.4 * 8/256 = 0.6125 (tokens without the hot pick may draw it uniformly);
  // the standard deviation over 4000 tokens is 0.008.
  const double share = static_cast<double>(with_hot) / tokens;
  EXPECT_GT(share, 0.58);
  EXPECT_LT(share, 0.645);
}

TEST(Routing, SkewedWithFullShareAlwaysHasTheHotExpert) {
  RoutingSpec spec;
  spec.kind = RoutingKind::skewed;
  spec.hot_share = 1.0;
  spec.hot_expert = 255;
  const Routing r = make_routing(spec, 1, 100, 4, 256);
  for (int t = 0; t < 100; ++t) {
    int hot = 0;
    for (int j = 0; j < 4; ++j) hot += r[static_cast<size_t>(t) * 4 + j] == 255;
    EXPECT_EQ(hot, 1) << t;
  }
}

TEST(Routing, MaskedEntriesAppearAtTheGivenRate) {
  RoutingSpec spec;
  spec.masked = 0.25;
  const Routing r = make_routing(spec, 0, 2000, 8, 64);
  int masked = 0;
  for (int64_t e : r) masked += e == -1;
  const double rate = static_cast<double>(masked) / static_cast<double>(r.size());
  EXPECT_GT(rate, 0.23);
  EXPECT_LT(rate, 0.27);
}

TEST(Routing, BelowIsInRange) {
  Rng rng(5);
  for (uint64_t n : {1ull, 2ull, 3ull, 7ull, 1000ull}) {
    for (int i = 0; i < 1000; ++i) EXPECT_LT(rng.below(n), n);
  }
  for (int i = 0; i < 1000; ++i) {
    const double u = rng.unit();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace epc::bench
