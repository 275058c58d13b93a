// SPDX-License-Identifier: Apache-2.0
// Reading the low-latency phase trace: which steps count, and each phase's duration.
#include <gtest/gtest.h>

#include <memory>

#include "bench/phase_trace.hpp"

namespace epc::bench {
namespace {

using namespace epc::kernels;

// Step s of an operation: starts at 10000 s ns; its payload is sent 100 + s ns later, its
// signals 300 ns after that, the wait ends 1000 ns after that and the receive 500 ns later.
void stamp_step(LlPhaseRecord* ring, uint64_t s) {
  const uint64_t t0 = 10000 * s;
  const uint64_t at[kLlPhases] = {t0, t0 + 100 + s, t0 + 400 + s, t0 + 1400 + s, t0 + 1900 + s};
  LlPhaseRecord& r = ring[s % kLlPhaseTraceSteps];
  for (int p = 0; p < kLlPhases; ++p) r.stamp[p] = LlPhaseStamp{s + 1, at[p]};
}

std::unique_ptr<LlPhaseTrace> trace_of(uint64_t steps) {
  auto trace = std::make_unique<LlPhaseTrace>();  // value-initialised: every stamp empty
  for (uint64_t s = 0; s < steps; ++s) {
    stamp_step(trace->dispatch, s);
    stamp_step(trace->combine, s);
  }
  return trace;
}

const Summary* find(const MetricList& m, const std::string& name) {
  for (const auto& [n, s] : m) {
    if (n == name) return &s;
  }
  return nullptr;
}

TEST(PhaseTrace, TheLastStepsGiveEachPhase) {
  const auto trace = trace_of(10);
  MetricList out;
  std::string problem;
  ASSERT_TRUE(phase_metrics(*trace, 4, out, problem)) << problem;  // steps 6..9
  ASSERT_EQ(out.size(), 10u);
  EXPECT_EQ(out[0].first, "ours.phase.dispatch_send");
  EXPECT_EQ(out[4].first, "ours.phase.dispatch_total");
  EXPECT_EQ(out[5].first, "ours.phase.combine_send");
  const Summary* send = find(out, "ours.phase.dispatch_send");
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(send->samples, 4);
  EXPECT_EQ(send->p10_us, 0.106);
  EXPECT_EQ(send->median_us, 0.108);
  EXPECT_EQ(send->p90_us, 0.109);
  EXPECT_DOUBLE_EQ(send->mean_us, 0.1075);
  EXPECT_EQ(find(out, "ours.phase.dispatch_signal")->median_us, 0.3);
  EXPECT_EQ(find(out, "ours.phase.combine_wait")->median_us, 1.0);
  EXPECT_EQ(find(out, "ours.phase.combine_receive")->median_us, 0.5);
  EXPECT_EQ(find(out, "ours.phase.combine_total")->median_us, 1.908);
}

TEST(PhaseTrace, IncompleteStepsAreLeftOut) {
  auto trace = trace_of(10);
  trace->dispatch[8].stamp[kLlPhaseWaitDone].step_plus_one = 0;     // step 8 failed before its wait ended
  trace->dispatch[9].stamp[kLlPhaseSignalsSent].step_plus_one = 7;  // a stale stamp of an earlier lap
  MetricList out;
  std::string problem;
  ASSERT_TRUE(phase_metrics(*trace, 4, out, problem)) << problem;
  // The latest complete step is now 7: steps 4..7 count.
  EXPECT_EQ(find(out, "ours.phase.dispatch_send")->samples, 4);
  EXPECT_EQ(find(out, "ours.phase.dispatch_send")->p90_us, 0.107);
  EXPECT_EQ(find(out, "ours.phase.combine_send")->p90_us, 0.109);  // combine is read on its own
}

TEST(PhaseTrace, TheRingHoldsTheLastStepsOnly) {
  const auto trace = trace_of(kLlPhaseTraceSteps + 6);  // the first 6 steps were overwritten
  MetricList out;
  std::string problem;
  ASSERT_TRUE(phase_metrics(*trace, 5000, out, problem)) << problem;
  const Summary* send = find(out, "ours.phase.dispatch_send");
  EXPECT_EQ(send->samples, kLlPhaseTraceSteps);
  // Steps 6..1029; the p10 is the 103rd smallest (index round(0.1 x 1023)): step 108.
  EXPECT_EQ(send->p10_us, 0.208);
}

TEST(PhaseTrace, NoCompleteStepIsAProblem) {
  auto empty = std::make_unique<LlPhaseTrace>();
  MetricList out;
  std::string problem;
  EXPECT_FALSE(phase_metrics(*empty, 10, out, problem));
  EXPECT_NE(problem.find("no complete dispatch step among the last 10"), std::string::npos) << problem;
  auto dispatch_only = std::make_unique<LlPhaseTrace>();
  stamp_step(dispatch_only->dispatch, 3);
  EXPECT_FALSE(phase_metrics(*dispatch_only, 10, out, problem));
  EXPECT_NE(problem.find("no complete combine step"), std::string::npos) << problem;
  EXPECT_TRUE(out.empty());  // nothing half-appended
}

}  // namespace
}  // namespace epc::bench
