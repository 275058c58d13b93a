// SPDX-License-Identifier: Apache-2.0
// Attributing CUPTI kernel records to measured calls, steps and graph replays.
#include <gtest/gtest.h>

#include <algorithm>

#include "bench/kernel_spans.hpp"

namespace epc::bench {
namespace {

constexpr int kDispatch = 0, kCombine = 2;

KernelRecord kernel(uint64_t start, uint64_t end, uint32_t correlation, uint32_t device = 0) {
  KernelRecord k;
  k.start_ns = start;
  k.end_ns = end;
  k.correlation = correlation;
  k.device = device;
  return k;
}

KernelRecord graph_kernel(uint64_t start, uint64_t end, uint64_t node, uint32_t graph = 7) {
  KernelRecord k = kernel(start, end, 900);
  k.graph = graph;
  k.graph_node = node;
  return k;
}

TEST(KernelSpans, TagsAreDistinctAndNeverZero) {
  EXPECT_NE(call_tag(0, 0), 0u);
  EXPECT_NE(call_tag(0, 1), call_tag(1, 0));
  EXPECT_NE(call_tag(0, 255), call_tag(1, 0));
  EXPECT_EQ(call_tag(3, 2), call_tag(3, 2));
}

// Two back-to-back steps: every dispatch and combine was queued before the first kernel
// ran, so only the links say which kernel is whose. The combine launches two kernels.
struct TwoSteps {
  std::vector<KernelRecord> kernels = {
      kernel(1000, 1500, 11),      // step 0 dispatch
      kernel(1600, 1700, 12),      // step 0 combine, sending part
      kernel(1650, 2000, 13),      // step 0 combine, receiving part
      kernel(1800, 1900, 99),      // NCCL's, never linked: left out
      kernel(2100, 2400, 21),      // step 1 dispatch
      kernel(2500, 2600, 22),      // step 1 combine, sending part
      kernel(2700, 3300, 23),      // step 1 combine, receiving part
      kernel(100, 200000, 21, 1),  // same correlation id on another device: left out
  };
  std::vector<TagLink> links = {{11, call_tag(0, kDispatch)}, {12, call_tag(0, kCombine)}, {13, call_tag(0, kCombine)},
                                {21, call_tag(1, kDispatch)}, {22, call_tag(1, kCombine)}, {23, call_tag(1, kCombine)},
                                {21, call_tag(1, kDispatch)}};  // runtime and driver records alike
};

TEST(KernelSpans, CallsAndStepsSpanTheirOwnKernels) {
  const TwoSteps run;
  std::map<uint64_t, KernelSpan> by_tag;
  std::string error;
  ASSERT_TRUE(spans_by_tag(run.kernels, run.links, 0, by_tag, error)) << error;
  std::vector<double> us;
  ASSERT_TRUE(iteration_spans(by_tag, 2, {kDispatch}, us, error)) << error;
  EXPECT_EQ(us, (std::vector<double>{0.5, 0.3}));
  ASSERT_TRUE(iteration_spans(by_tag, 2, {kCombine}, us, error)) << error;
  EXPECT_EQ(us, (std::vector<double>{0.4, 0.8}));  // first start to last end of both kernels
  ASSERT_TRUE(iteration_spans(by_tag, 2, {kDispatch, kCombine}, us, error)) << error;
  EXPECT_EQ(us, (std::vector<double>{1.0, 1.2}));
  EXPECT_EQ(kernels_per_iteration(by_tag, 2, {kDispatch, kCombine}), 3);
  EXPECT_EQ(kernels_per_iteration(by_tag, 2, {kDispatch}), 1);
}

TEST(KernelSpans, AnotherDeviceIsItsOwn) {
  const TwoSteps run;
  std::map<uint64_t, KernelSpan> by_tag;
  std::string error;
  ASSERT_TRUE(spans_by_tag(run.kernels, run.links, 1, by_tag, error)) << error;
  ASSERT_EQ(by_tag.size(), 1u);
  EXPECT_EQ(by_tag.at(call_tag(1, kDispatch)).kernels, 1);
  EXPECT_EQ(by_tag.at(call_tag(1, kDispatch)).us(), 199.9);
}

TEST(KernelSpans, AnIterationWithoutKernelsIsAnError) {
  TwoSteps run;
  run.kernels.erase(run.kernels.begin() + 4);  // step 1's dispatch record was lost
  std::map<uint64_t, KernelSpan> by_tag;
  std::string error;
  ASSERT_TRUE(spans_by_tag(run.kernels, run.links, 0, by_tag, error)) << error;
  std::vector<double> us;
  EXPECT_FALSE(iteration_spans(by_tag, 2, {kDispatch}, us, error));
  EXPECT_NE(error.find("no kernel for iteration 1 (parts 0)"), std::string::npos) << error;
  // The step still has its combine kernels; the counts now differ between steps.
  EXPECT_TRUE(iteration_spans(by_tag, 2, {kDispatch, kCombine}, us, error)) << error;
  EXPECT_EQ(kernels_per_iteration(by_tag, 2, {kDispatch, kCombine}), -1);
  EXPECT_FALSE(iteration_spans(by_tag, 3, {kCombine}, us, error));
  EXPECT_NE(error.find("iteration 2"), std::string::npos) << error;
}

TEST(KernelSpans, BadRecordsAreErrors) {
  std::map<uint64_t, KernelSpan> by_tag;
  std::string error;
  EXPECT_FALSE(spans_by_tag({kernel(0, 0, 1)}, {{1, call_tag(0, 0)}}, 0, by_tag, error));
  EXPECT_NE(error.find("could not time"), std::string::npos) << error;
  EXPECT_FALSE(spans_by_tag({kernel(500, 400, 1)}, {{1, call_tag(0, 0)}}, 0, by_tag, error));
  EXPECT_NE(error.find("ends before it starts"), std::string::npos) << error;
  EXPECT_FALSE(spans_by_tag({}, {{1, call_tag(0, 0)}, {1, call_tag(0, 1)}}, 0, by_tag, error));
  EXPECT_NE(error.find("correlation id 1 to two tags"), std::string::npos) << error;
  // An unlinked kernel without timestamps is not ours and does not matter.
  EXPECT_TRUE(spans_by_tag({kernel(0, 0, 5)}, {{1, call_tag(0, 0)}}, 0, by_tag, error)) << error;
  EXPECT_TRUE(by_tag.empty());
}

// Two replays of a graph of three steps, each step two kernels (nodes 1, 2 / 3, 4 / 5, 6).
std::vector<KernelRecord> two_replays() {
  std::vector<KernelRecord> k;
  uint64_t t = 10000;
  for (int replay = 0; replay < 2; ++replay) {
    for (int step = 0; step < 3; ++step) {
      const uint64_t node = 1 + 2 * static_cast<uint64_t>(step);
      const uint64_t first = 100 + 10 * static_cast<uint64_t>(step + 3 * replay);  // 100, 110, ... 150 ns
      k.push_back(graph_kernel(t, t + first, node));
      k.push_back(graph_kernel(t + first + 20, t + first + 50, node + 1));
      t += 1000;
    }
  }
  return k;
}

TEST(KernelSpans, GraphReplaysCutIntoSteps) {
  std::vector<KernelRecord> k = two_replays();
  k.push_back(kernel(10500, 10600, 3));  // an eager kernel meanwhile: not a graph's
  std::reverse(k.begin(), k.end());      // CUPTI's buffers need not be in start order
  GraphSpans spans;
  std::string error;
  ASSERT_TRUE(graph_step_spans(k, 0, 2, 3, {2, 0}, spans, error)) << error;
  EXPECT_EQ(spans.step, (std::vector<double>{0.15, 0.16, 0.17, 0.18, 0.19, 0.2}));
  EXPECT_TRUE(spans.dispatch.empty());  // the eager step did not say which kernel was its dispatch
  EXPECT_TRUE(spans.combine.empty());
  ASSERT_TRUE(graph_step_spans(k, 0, 2, 3, {0, 0}, spans, error)) << error;  // eager count unknown
  EXPECT_EQ(spans.step.size(), 6u);
  ASSERT_TRUE(graph_step_spans(k, 0, 1, 6, {2, 0}, spans, error)) << error;  // one replay of six steps: same nodes
  EXPECT_EQ(spans.step.size(), 6u);
}

TEST(KernelSpans, GraphStepsCutIntoTheirCalls) {
  std::vector<KernelRecord> k = two_replays();
  std::reverse(k.begin(), k.end());
  GraphSpans spans;
  std::string error;
  // The eager step's first kernel was its dispatch, the second its combine.
  ASSERT_TRUE(graph_step_spans(k, 0, 2, 3, {2, 1}, spans, error)) << error;
  EXPECT_EQ(spans.step, (std::vector<double>{0.15, 0.16, 0.17, 0.18, 0.19, 0.2}));
  EXPECT_EQ(spans.dispatch, (std::vector<double>{0.1, 0.11, 0.12, 0.13, 0.14, 0.15}));
  EXPECT_EQ(spans.combine, (std::vector<double>(6, 0.03)));
  // A dispatch of every kernel leaves no combine to time: no halves, the steps still.
  ASSERT_TRUE(graph_step_spans(k, 0, 2, 3, {2, 2}, spans, error)) << error;
  EXPECT_EQ(spans.step.size(), 6u);
  EXPECT_TRUE(spans.dispatch.empty());
  // Without the eager count the cut is not checked, so no halves either.
  ASSERT_TRUE(graph_step_spans(k, 0, 2, 3, {0, 1}, spans, error)) << error;
  EXPECT_TRUE(spans.dispatch.empty());
}

TEST(KernelSpans, GraphCutsThatDoNotFitAreErrors) {
  GraphSpans spans;
  std::string error;
  EXPECT_FALSE(graph_step_spans(two_replays(), 0, 2, 4, {0, 0}, spans, error));  // 12 kernels, 8 steps
  EXPECT_NE(error.find("12 kernels launched by graphs, which do not divide into 2 replays of 4 steps"),
            std::string::npos)
      << error;
  EXPECT_FALSE(graph_step_spans(two_replays(), 0, 2, 3, {1, 0}, spans, error));  // the eager step had one kernel
  EXPECT_NE(error.find("a replayed step launched 2 kernels, an eager step 1"), std::string::npos) << error;
  EXPECT_FALSE(graph_step_spans(two_replays(), 1, 2, 3, {0, 0}, spans, error));  // nothing on device 1
  EXPECT_NE(error.find("reported 0 kernels"), std::string::npos) << error;
  std::vector<KernelRecord> foreign = two_replays();
  foreign[7].graph = 8;  // a kernel of another graph in the second replay
  EXPECT_FALSE(graph_step_spans(foreign, 0, 2, 3, {0, 0}, spans, error));
  EXPECT_NE(error.find("replay 1 launched graph node 2 (graph 8)"), std::string::npos) << error;
  EXPECT_FALSE(graph_step_spans(two_replays(), 0, 0, 3, {0, 0}, spans, error));
}

TEST(KernelSpans, SpansMerge) {
  KernelSpan a, b, empty;
  a.add(100, 200);
  b.add(50, 120);
  b.add(300, 400);
  a.add(empty);
  EXPECT_EQ(a.kernels, 1);
  a.add(b);
  EXPECT_EQ(a.kernels, 3);
  EXPECT_EQ(a.first_start_ns, 50u);
  EXPECT_EQ(a.last_end_ns, 400u);
  EXPECT_EQ(a.us(), 0.35);
}

}  // namespace
}  // namespace epc::bench
