// SPDX-License-Identifier: Apache-2.0
#include "bench/cupti_timing.hpp"

#include <algorithm>
#include <cstdio>

#include "bench/try_call.hpp"

namespace epc::bench {

bool record_pass(RankSession& session, KernelTracer& tracer, int end_mark,
                 const std::function<bool(StepMarks& marks, std::string& error)>& run,
                 std::map<uint64_t, KernelSpan>& by_tag, std::string& problem, std::string& error) {
  by_tag.clear();
  problem.clear();
  const bool recording = tracer.usable() && tracer.start(problem);
  if (!tracer.usable()) problem = "the kernel tracer stopped working earlier in the run";
  bool ran = false;
  {
    TagMarks marks(tracer, end_mark);
    ran = run(marks, error);
  }
  const cudaError_t synced = cudaStreamSynchronize(session.stream());
  std::vector<KernelRecord> kernels;
  std::vector<TagLink> links;
  std::string stop_error;
  // Stopped even when the run failed: a recording left on would slow whatever comes next.
  if (recording && !tracer.stop(kernels, links, stop_error)) problem = stop_error;
  if (!ran) return false;
  TRY_CUDA(synced, "running the steps recorded by CUPTI");
  if (problem.empty()) spans_by_tag(kernels, links, static_cast<uint32_t>(session.device()), by_tag, problem);
  return true;
}

void keep_if_every_rank_has(RankSession& session, const std::string& what, const MetricList& figures,
                            const std::string& problem, MetricList& out) {
  if (session.all_true(problem.empty())) {
    out.insert(out.end(), figures.begin(), figures.end());
  } else if (!problem.empty()) {
    std::fprintf(stderr, "epcomm-bench: rank %d: no %s at this point: %s\n", session.rank(), what.c_str(),
                 problem.c_str());
  }
}

bool time_cupti_steps(RankSession& session, KernelTracer& tracer, int warmup, int iters, bool send_only,
                      const StepCalls& step, MetricList& out, StepKernels& kernels, std::string& error) {
  kernels = StepKernels{};
  for (int i = 0; i < warmup; ++i) {
    if (!step.dispatch(nullptr, 0, error) || !step.combine(nullptr, 0, error)) return false;
  }
  std::map<uint64_t, KernelSpan> by_tag;
  std::string problem;
  const auto steps = [&](StepMarks& marks, std::string& e) {
    for (int i = 0; i < iters; ++i) {
      if (!step.dispatch(&marks, i, e) || !step.combine(&marks, i, e)) return false;
    }
    return true;
  };
  if (!record_pass(session, tracer, kCombineDone, steps, by_tag, problem, error)) return false;
  MetricList figures;
  for (const StepSpan& span : kStepSpans) {
    if (span.send_only && !send_only) continue;
    // A span from one mark to a later one covers the parts its marks open (TagMarks).
    std::vector<int> parts;
    for (int mark = span.from; mark < span.to; ++mark) parts.push_back(mark);
    std::vector<double> us;
    if (!problem.empty() || !iteration_spans(by_tag, iters, parts, us, problem)) break;
    figures.emplace_back(std::string("ours.cupti.") + span.name, summarize(us));
  }
  if (problem.empty()) {
    kernels.per_step =
        std::max(0, kernels_per_iteration(by_tag, iters, {kStart, kDispatchSent, kDispatchDone, kCombineSent}));
    kernels.dispatch = std::max(0, kernels_per_iteration(by_tag, iters, {kStart, kDispatchSent}));
  }
  keep_if_every_rank_has(session, "CUPTI kernel spans", figures, problem, out);
  return true;
}

bool time_cupti_calls(RankSession& session, KernelTracer& tracer, const std::string& name, int iters,
                      const StepHalf& call, MetricList& out, std::string& error) {
  std::map<uint64_t, KernelSpan> by_tag;
  std::string problem;
  const auto calls = [&](StepMarks& marks, std::string& e) {
    for (int i = 0; i < iters; ++i) {
      if (!call(&marks, i, e)) return false;
    }
    return true;
  };
  if (!record_pass(session, tracer, 1, calls, by_tag, problem, error)) return false;
  MetricList figures;
  std::vector<double> us;
  if (problem.empty() && iteration_spans(by_tag, iters, {0}, us, problem)) figures.emplace_back(name, summarize(us));
  keep_if_every_rank_has(session, "CUPTI kernel spans of " + name, figures, problem, out);
  return true;
}

bool time_cupti_graph(RankSession& session, KernelTracer& tracer, cudaGraph_t graph, int iters, int replays,
                      const StepKernels& eager, MetricList& out, std::string& error) {
  const cudaStream_t st = session.stream();
  std::string problem;
  const bool recording = tracer.usable() && tracer.start(problem);
  if (!tracer.usable()) problem = "the kernel tracer stopped working earlier in the run";
  // Instantiated while recording, in case CUPTI only traces the nodes of graphs it saw
  // instantiated.
  GraphExec replayed;
  const cudaError_t instantiated = cudaGraphInstantiate(&replayed.exec, graph, 0);
  if (instantiated != cudaSuccess) {
    cudaGetLastError();
    if (problem.empty()) problem = cuda_error("cudaGraphInstantiate for the CUPTI replays", instantiated);
  }
  // Replays are collective: every rank replays or none does.
  const bool everyone = session.all_true(instantiated == cudaSuccess);
  if (!everyone && problem.empty()) problem = "another rank could not instantiate the graph";
  bool launched = true;
  for (int i = 0; everyone && launched && i <= replays; ++i) {
    launched = cudaGraphLaunch(replayed.exec, st) == cudaSuccess;
  }
  const cudaError_t synced = cudaStreamSynchronize(st);
  std::vector<KernelRecord> kernels;
  std::vector<TagLink> links;
  std::string stop_error;
  if (recording && !tracer.stop(kernels, links, stop_error) && problem.empty()) problem = stop_error;
  if (!launched || synced != cudaSuccess) {
    error = cuda_error("replaying the captured graph for CUPTI", synced == cudaSuccess ? cudaGetLastError() : synced);
    return false;
  }
  MetricList figures;
  GraphSpans spans;
  if (problem.empty() &&
      graph_step_spans(kernels, static_cast<uint32_t>(session.device()), replays + 1, iters, eager, spans, problem)) {
    const auto add = [&](const char* name, std::vector<double>& us) {
      if (us.empty()) return;
      us.erase(us.begin(), us.begin() + iters);  // the uploading replay's steps
      figures.emplace_back(std::string("ours.cupti_graph.") + name, summarize(us));
    };
    add("step", spans.step);
    add("dispatch", spans.dispatch);
    add("combine", spans.combine);
  }
  keep_if_every_rank_has(session, "CUPTI kernel spans of the graph replays", figures, problem, out);
  return true;
}

}  // namespace epc::bench
