// SPDX-License-Identifier: Apache-2.0
#include "bench/phase_trace.hpp"

#include <algorithm>
#include <vector>

namespace epc::bench {
namespace {

using kernels::LlPhaseRecord;

struct PhaseSpan {
  const char* name;
  int from, to;
};

constexpr PhaseSpan kSpans[] = {{"send", kernels::kLlPhaseStart, kernels::kLlPhasePayloadSent},
                                {"signal", kernels::kLlPhasePayloadSent, kernels::kLlPhaseSignalsSent},
                                {"wait", kernels::kLlPhaseSignalsSent, kernels::kLlPhaseWaitDone},
                                {"receive", kernels::kLlPhaseWaitDone, kernels::kLlPhaseReceiveDone},
                                {"total", kernels::kLlPhaseStart, kernels::kLlPhaseReceiveDone}};

// The step a record holds when all its stamps belong to one step, else 0 (steps are stamped
// plus one).
uint64_t complete_step(const LlPhaseRecord& r) {
  const uint64_t step = r.stamp[0].step_plus_one;
  for (const kernels::LlPhaseStamp& s : r.stamp) {
    if (s.step_plus_one != step) return 0;
  }
  return step;
}

bool one_operation(const LlPhaseRecord* ring, const char* op, int steps, MetricList& out, std::string& problem) {
  uint64_t latest = 0;
  for (int i = 0; i < kernels::kLlPhaseTraceSteps; ++i) latest = std::max(latest, complete_step(ring[i]));
  const uint64_t wanted = static_cast<uint64_t>(std::min(std::max(steps, 0), kernels::kLlPhaseTraceSteps));
  std::vector<double> us[sizeof kSpans / sizeof kSpans[0]];
  for (int i = 0; latest > 0 && i < kernels::kLlPhaseTraceSteps; ++i) {
    const uint64_t step = complete_step(ring[i]);
    if (step == 0 || step + wanted <= latest) continue;  // incomplete, or before the last `wanted`
    for (size_t k = 0; k < sizeof kSpans / sizeof kSpans[0]; ++k) {
      const int64_t ns = static_cast<int64_t>(ring[i].stamp[kSpans[k].to].ns - ring[i].stamp[kSpans[k].from].ns);
      us[k].push_back(static_cast<double>(ns) / 1e3);
    }
  }
  if (us[0].empty()) {
    problem = std::string("the phase trace has no complete ") + op + " step among the last " + std::to_string(wanted);
    return false;
  }
  for (size_t k = 0; k < sizeof kSpans / sizeof kSpans[0]; ++k) {
    out.emplace_back(std::string("ours.phase.") + op + "_" + kSpans[k].name, summarize(us[k]));
  }
  return true;
}

}  // namespace

bool phase_metrics(const kernels::LlPhaseTrace& trace, int steps, MetricList& out, std::string& problem) {
  MetricList figures;
  if (!one_operation(trace.dispatch, "dispatch", steps, figures, problem) ||
      !one_operation(trace.combine, "combine", steps, figures, problem)) {
    return false;
  }
  out.insert(out.end(), figures.begin(), figures.end());
  return true;
}

}  // namespace epc::bench
