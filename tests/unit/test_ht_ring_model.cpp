// SPDX-License-Identifier: Apache-2.0
// The credit-ring protocol for HT across nodes (tests/unit/ht_ring_model.hpp), run under a
// seeded random scheduler with rings of 1 to 3 slots and 1 to 3 channels: every run must
// finish (no deadlock), never hold more slots than a ring has (the model throws), place
// every dispatched row once where ref::ht_dispatch has it, and combine bit for bit as
// ref::ht_combine(..., node_size) does. Two steps run back to back on the same rings, so
// the second starts from counters the first left (they only grow).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tests/reference/numeric.hpp"
#include "tests/reference/problem_gen.hpp"
#include "tests/reference/reference.hpp"
#include "tests/unit/ht_ring_model.hpp"

namespace {

using epc::test::RingModelOptions;
using epc::test::RingModelRun;
using epc::test::RingModelShape;

struct Routing {
  double hot = 0.0;
  double masked = 0.0;
  bool random_counts = false;
};

struct Steps {
  std::vector<epc::ref::Problem> problems;
  std::vector<std::vector<std::vector<uint16_t>>> combine_in;
};

Steps make_steps(const RingModelShape& shape, const Routing& routing, uint64_t seed, int steps = 2) {
  Steps out;
  std::mt19937_64 rng(seed);
  // Magnitudes 2^-14 .. 2^14 apart: fp32 sums then round, so any change of the summation
  // order shows in the bits.
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-14, 14);
  for (int i = 0; i < steps; ++i) {
    epc::ref::ProblemGenOptions o;
    o.nranks = shape.nodes * shape.node_size;
    o.num_experts = 2 * o.nranks;
    o.hidden = 8;
    o.topk = 4;
    o.max_tokens = 7;
    o.seed = seed * 31 + static_cast<uint64_t>(i);
    o.hot_expert_share = routing.hot;
    o.hot_expert = o.num_experts - 1;
    o.masked_fraction = routing.masked;
    o.random_token_counts = routing.random_counts;
    out.problems.push_back(epc::ref::make_random_problem(o));
    const auto dispatched = epc::ref::ht_dispatch(out.problems.back());
    std::vector<std::vector<uint16_t>> in(o.nranks);
    for (int q = 0; q < o.nranks; ++q) {
      in[q].resize(static_cast<size_t>(dispatched[q].rows) * o.hidden);
      for (uint16_t& b : in[q]) b = epc::ref::float_to_bf16(std::ldexp(mantissa(rng), exponent(rng)));
    }
    out.combine_in.push_back(std::move(in));
  }
  return out;
}

// Runs the model and checks it against the reference; returns the run.
RingModelRun check(const RingModelShape& shape, const Routing& routing, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << shape.nodes << " nodes of " << shape.node_size << ", " << shape.channels
                                  << " channel(s), " << shape.capacity << " slot(s), seed " << seed);
  const Steps steps = make_steps(shape, routing, seed);
  RingModelOptions options;
  options.seed = seed;
  const RingModelRun run = epc::test::run_ring_model(shape, steps.problems, steps.combine_in, options);
  EXPECT_FALSE(run.deadlocked) << run.stuck;
  EXPECT_LE(run.max_occupancy, shape.capacity);
  if (run.deadlocked) return run;
  for (size_t i = 0; i < steps.problems.size(); ++i) {
    const auto dispatched = epc::ref::ht_dispatch(steps.problems[i]);
    const auto combined = epc::ref::ht_combine(steps.problems[i], steps.combine_in[i], {}, shape.node_size);
    for (size_t q = 0; q < dispatched.size(); ++q) {
      EXPECT_EQ(run.steps[i].dispatched[q], dispatched[q].x) << "step " << i << " rank " << q;
      EXPECT_EQ(run.steps[i].src[q].size(), dispatched[q].src.size());
      for (size_t r = 0; r < dispatched[q].src.size() && r < run.steps[i].src[q].size(); ++r) {
        EXPECT_EQ(run.steps[i].src[q][r].src_rank, dispatched[q].src[r].src_rank);
        EXPECT_EQ(run.steps[i].src[q][r].src_token, dispatched[q].src[r].src_token);
      }
      EXPECT_EQ(run.steps[i].combined[q], combined.x[q]) << "step " << i << " rank " << q;
    }
  }
  return run;
}

const Routing kRoutings[] = {{}, {0.4, 0.0, false}, {0.0, 0.3, true}};
const int kSplits[][2] = {{2, 1}, {2, 2}, {3, 2}, {2, 4}, {4, 2}};

TEST(HtRingModel, EveryScheduleFinishesAndMatchesTheReference) {
  uint32_t filled = 0;  // runs in which some ring was full
  for (uint32_t capacity = 1; capacity <= 3; ++capacity) {
    for (int channels = 1; channels <= 3; ++channels) {
      for (const auto& split : kSplits) {
        for (const Routing& routing : kRoutings) {
          for (uint64_t seed = 1; seed <= 2; ++seed) {
            const RingModelShape shape{split[0], split[1], channels, capacity};
            const RingModelRun run = check(shape, routing, seed + 10 * capacity + 100 * channels);
            filled += run.max_occupancy == capacity ? 1 : 0;
          }
        }
      }
    }
  }
  // The rings did wrap and fill: most runs moved more rows than their rings hold.
  EXPECT_GT(filled, 100u);
}

// Many schedules of one shape: 4 nodes, one slot, one channel, hot routing.
TEST(HtRingModel, ManySchedulesOfOneShape) {
  for (uint64_t seed = 1; seed <= 60; ++seed) check({4, 2, 1, 1}, {0.4, 0.1, true}, seed);
}

// The scheduler finds a deadlock where there is one: forwarders that drain their rail inputs
// one after the other, each starting from the next node's (instead of polling them all),
// wait on one source while another source's one-slot ring to them stays full, and across
// three nodes the waits close a cycle.
TEST(HtRingModel, BlockingForwardersDeadlock) {
  int deadlocks = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const RingModelShape shape{3, 2, 1, 1};
    const Steps steps = make_steps(shape, {}, seed, 1);
    RingModelOptions options;
    options.seed = seed;
    options.blocking_forwarder = true;
    deadlocks += epc::test::run_ring_model(shape, steps.problems, steps.combine_in, options).deadlocked ? 1 : 0;
  }
  EXPECT_GT(deadlocks, 0);
}

}  // namespace
