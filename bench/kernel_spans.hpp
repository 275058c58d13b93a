// SPDX-License-Identifier: Apache-2.0
// From CUPTI's kernel records to the durations the bench reports: which kernels belong to
// which measured call, step or graph replay, and the span each took on the GPU (the first
// kernel's start to the last kernel's end). Pure CPU: the records come from
// bench/kernel_tracer.hpp on a GPU, or from a unit test.
//
// Attribution rules, and why:
//  - Eager calls: before each call the bench pushes an external correlation id (a "tag":
//    iteration and part of the step) on CUPTI's stack and pops it after. CUPTI links every
//    API call made meanwhile (the launches inside the library) to that tag, and every kernel
//    record carries its launch's correlation id. So a kernel belongs to the call that
//    launched it, however late it runs: back-to-back steps queue many calls before the first
//    kernel starts, which rules out matching by time. Kernels launched by anything else
//    (NCCL, another thread) have no link and are left out.
//  - Graph replays: a replay's kernels all carry the correlation id of its cudaGraphLaunch,
//    which says nothing about the step inside the replay; CUDA 13.0 and 13.1 also gave wrong
//    correlation ids to graph launches after the first profiling session. So replays are
//    attributed by position instead: the bench runs nothing but its replays while it records
//    them, every captured step is a chain on one stream (a kernel starts after the previous
//    one ends), and every step launches the same kernels. The kernels a graph launched on the
//    device (graph id not 0), in start order, therefore fall into replays x steps groups of
//    equal size. The checks below refuse the cut when a count does not divide, when a replay
//    launched other graph nodes than the first, or when a step has another kernel count than
//    the eager steps had.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace epc::bench {

// One kernel execution (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), reduced to what attribution
// needs. Timestamps are CUPTI's, in ns.
struct KernelRecord {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t device = 0;
  uint32_t correlation = 0;  // the correlation id of the API call that launched it
  uint32_t graph = 0;        // the launching graph's id; 0 for an eager launch
  uint64_t graph_node = 0;   // the launching graph node's id; 0 for an eager launch
};

// False, with `error` naming the kernel, when CUPTI gave `k` no times or an end before its start.
bool check_times(const KernelRecord& k, std::string& error);

// CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: the API call with `correlation` was made while
// the bench had pushed `tag`.
struct TagLink {
  uint32_t correlation = 0;
  uint64_t tag = 0;
};

// The tag of one measured call: its iteration (0-based) and its part of the step (0..255,
// the caller's numbering). Never 0, which CUPTI reads as "none".
uint64_t call_tag(int iteration, int part);

// From the first start to the last end of some kernels.
struct KernelSpan {
  uint64_t first_start_ns = 0;
  uint64_t last_end_ns = 0;
  int kernels = 0;
  void add(uint64_t start_ns, uint64_t end_ns);
  void add(const KernelSpan& other);
  double us() const;
};

// The kernels of `device` linked to a tag, as one span per tag. Kernels without a link are
// left out. False with `error` set when a kernel has no timestamps, ends before it starts,
// or one API call is linked to two tags.
bool spans_by_tag(const std::vector<KernelRecord>& kernels, const std::vector<TagLink>& links, uint32_t device,
                  std::map<uint64_t, KernelSpan>& out, std::string& error);

// For each iteration 0..iterations-1, the span of every kernel of the given parts (a call
// is one part; a step all of its parts), in us. False with `error` naming the first
// iteration whose parts launched no kernel CUPTI reported.
bool iteration_spans(const std::map<uint64_t, KernelSpan>& by_tag, int iterations, const std::vector<int>& parts,
                     std::vector<double>& us, std::string& error);

// The kernels each iteration's parts launched, when every iteration launched as many; else
// -1 (a graph's steps are checked against it).
int kernels_per_iteration(const std::map<uint64_t, KernelSpan>& by_tag, int iterations, const std::vector<int>& parts);

// What one eager step launched: `per_step` kernels (0: unknown), the first `dispatch` of them
// (in start order) its dispatch, the rest its combine (0: unknown).
struct StepKernels {
  int per_step = 0;
  int dispatch = 0;
};

// A replayed step's spans in us: the whole step, and its dispatch and its combine when the
// eager step said how many of its kernels each launched (else those two stay empty).
struct GraphSpans {
  std::vector<double> step;
  std::vector<double> dispatch;
  std::vector<double> combine;
};

// Graph replays (the second rule above): the spans of each of `replays` x `steps` steps, in
// replay order. `eager` is what one eager step launched (per_step 0: unknown, not checked).
// A step's first eager.dispatch kernels are its dispatch: a captured step is a chain, so its
// dispatch's kernels start before its combine's. False with `error` set when the kernels do
// not cut into equal steps.
bool graph_step_spans(const std::vector<KernelRecord>& kernels, uint32_t device, int replays, int steps,
                      const StepKernels& eager, GraphSpans& out, std::string& error);

}  // namespace epc::bench
