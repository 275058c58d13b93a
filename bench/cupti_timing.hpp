// SPDX-License-Identifier: Apache-2.0
// The GPU time of our kernels themselves, from CUPTI's kernel records (bench/kernel_tracer.hpp,
// attributed as bench/kernel_spans.hpp says), beside the CUDA-event and host-clock timings:
//  cupti:       `iters` back-to-back steps after `warmup`, run as the kernel timing runs them;
//               per call and per step, the span from the first kernel's start to the last
//               kernel's end of what it launched (no host time, no gap before the first
//               kernel);
//  cupti_graph: replays of the captured steps; per step, the span of its kernels.
// Each is a pass of its own, since recording slows every launch. The steps are collective,
// so every rank runs the same pass whether its tracer records or not; the figures are kept
// only when every rank has them (the metric lists must match), and a rank without them says
// why on stderr.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "bench/kernel_tracer.hpp"
#include "bench/mode_support.hpp"

namespace epc::bench {

// The executable of a graph, destroyed with its owner: instantiated while CUPTI records, in
// case CUPTI only traces the nodes of graphs it saw instantiated.
struct GraphExec {
  cudaGraphExec_t exec = nullptr;
  GraphExec() = default;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
};

// Collective. Appends ours.cupti.{dispatch,combine,step} (with `send_only` also the halves, as
// the kernel timing names them) and sets `kernels` (what one step launched and how many of
// those its dispatch; 0 when unknown).
bool time_cupti_steps(RankSession& session, KernelTracer& tracer, int warmup, int iters, bool send_only,
                      const StepCalls& step, MetricList& out, StepKernels& kernels, std::string& error);

// Collective. `iters` calls, each recording marks 0 and 1 around itself (as a step half
// records its marks); appends `name` with each call's span.
bool time_cupti_calls(RankSession& session, KernelTracer& tracer, const std::string& name, int iters,
                      const StepHalf& call, MetricList& out, std::string& error);

// Collective. Replays `graph` (`iters` steps) `replays` times, after one replay that is
// recorded but not counted (it uploads the graph); appends ours.cupti_graph.step and, when
// `eager` cuts a step into its two calls, ours.cupti_graph.{dispatch,combine}.
bool time_cupti_graph(RankSession& session, KernelTracer& tracer, cudaGraph_t graph, int iters, int replays,
                      const StepKernels& eager, MetricList& out, std::string& error);

// One recorded pass, for the timings above and the latency floor: `run` gets marks that tag
// every API call with (iteration, part) until `end_mark`; the stream is then synchronised
// and the kernels of this rank's device attributed. False only when `run` or CUDA failed
// (the run stops); a pass without spans returns true with `problem` set.
bool record_pass(RankSession& session, KernelTracer& tracer, int end_mark,
                 const std::function<bool(StepMarks& marks, std::string& error)>& run,
                 std::map<uint64_t, KernelSpan>& by_tag, std::string& problem, std::string& error);

// Collective. Appends `figures` to `out` when every rank's `problem` is empty; otherwise a
// rank with a problem prints it (naming `what`) and nothing is appended anywhere.
void keep_if_every_rank_has(RankSession& session, const std::string& what, const MetricList& figures,
                            const std::string& problem, MetricList& out);

}  // namespace epc::bench
