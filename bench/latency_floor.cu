// SPDX-License-Identifier: Apache-2.0
#include "bench/latency_floor.hpp"

#include "bench/cupti_timing.hpp"
#include "bench/try_call.hpp"
#include "kernels/ll/ll_step_kernel.cuh"

namespace epc::bench {
namespace {

constexpr int kUntimedLaunches = 10;

__global__ void __launch_bounds__(kernels::kLlThreads) empty_kernel() {}

bool launch_empty(int blocks, cudaStream_t stream, std::string& error) {
  empty_kernel<<<blocks, kernels::kLlThreads, 0, stream>>>();
  TRY_CUDA(cudaGetLastError(), "launching the empty kernel of the latency floor");
  return true;
}

}  // namespace

int ll_block_threads() { return kernels::kLlThreads; }

bool measure_latency_floor(RankSession& session, KernelTracer& tracer, int blocks, int iters, Summary& call,
                           Summary& step, std::string& problem, std::string& error) {
  const cudaStream_t st = session.stream();
  if (blocks < 1 || iters < 1) {
    problem = "the floor needs a grid and at least one step (blocks " + std::to_string(blocks) + ", steps " +
              std::to_string(iters) + ")";
    return true;
  }
  for (int i = 0; i < kUntimedLaunches; ++i) {
    if (!launch_empty(blocks, st, error)) return false;
  }
  TRY_CUDA(cudaStreamSynchronize(st), "running the untimed empty kernels");
  // Each step: mark 0, a kernel (part 0), mark 1, a kernel (part 1), mark 2 (the end).
  const auto steps = [&](StepMarks& marks, std::string& e) {
    for (int i = 0; i < iters; ++i) {
      marks.record(i, 0, st);
      if (!launch_empty(blocks, st, e)) return false;
      marks.record(i, 1, st);
      if (!launch_empty(blocks, st, e)) return false;
      marks.record(i, 2, st);
    }
    return true;
  };
  std::map<uint64_t, KernelSpan> by_tag;
  if (!record_pass(session, tracer, 2, steps, by_tag, problem, error)) return false;
  std::vector<double> first, second, both;
  if (problem.empty() && iteration_spans(by_tag, iters, {0}, first, problem) &&
      iteration_spans(by_tag, iters, {1}, second, problem) && iteration_spans(by_tag, iters, {0, 1}, both, problem)) {
    first.insert(first.end(), second.begin(), second.end());
    call = summarize(first);
    step = summarize(both);
  }
  return true;
}

}  // namespace epc::bench
