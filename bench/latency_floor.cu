// SPDX-License-Identifier: Apache-2.0
#include "bench/latency_floor.hpp"

#include <algorithm>
#include <vector>

#include "bench/cupti_timing.hpp"
#include "bench/mode_support.hpp"
#include "bench/try_call.hpp"
#include "kernels/ll/ll_step_kernel.cuh"
#include "kernels/wire/limits.hpp"
#include "kernels/wire/ll_params.hpp"

namespace epc::bench {
namespace {

constexpr int kUntimedLaunches = 10;

__global__ void __launch_bounds__(kernels::kLlThreads) empty_kernel() {}

bool launch_empty(int blocks, cudaStream_t stream, std::string& error) {
  empty_kernel<<<blocks, kernels::kLlThreads, 0, stream>>>();
  TRY_CUDA(cudaGetLastError(), "launching the empty kernel of the latency floor");
  return true;
}

// The routed row (latency_floor.hpp): block b < `slices` loads its slice of `row` (16-byte
// vectors, one a thread per round) and the `topk` ids (lane j of each warp loads id j and
// shuffles it to the others), then stores the slice into row id of `out` for each id. The
// first round's vectors load with the ids, so that its stores wait for one round trip. Small
// on purpose: at a launch's start an SM fetches the kernel's code, and a larger kernel doing
// the same work measured up to 0.6 us slower.
__global__ void __launch_bounds__(kernels::kLlThreads)
    routed_row_kernel(const int* __restrict__ ids, const int4* __restrict__ row, int4* __restrict__ out, int topk,
                      int row_vectors, int slices) {
  static_assert(kernels::kMaxTopk <= 32, "a lane per id");
  if (static_cast<int>(blockIdx.x) >= slices) return;
  const int per_block = (row_vectors + slices - 1) / slices;
  const int begin = static_cast<int>(blockIdx.x) * per_block;
  const int end = begin + per_block < row_vectors ? begin + per_block : row_vectors;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int my_id = lane < topk ? ids[lane] : 0;
  for (int first = begin; first < end; first += static_cast<int>(blockDim.x)) {
    const int v = first + static_cast<int>(threadIdx.x);
    const bool mine = v < end;
    const int4 vector = mine ? row[v] : make_int4(0, 0, 0, 0);
#pragma unroll 1
    for (int j = 0; j < topk; ++j) {
      const int id = __shfl_sync(0xffffffffu, my_id, j);
      if (mine) out[static_cast<size_t>(id) * row_vectors + v] = vector;
    }
  }
}

// The routed row's buffers: one row, the token's ids (spread over the experts), a row per expert.
struct RoutedRow {
  DeviceBuffer ids, row, out;
  int topk = 0, row_vectors = 0, slices = 0;

  bool setup(const RoutedRowShape& shape, int blocks, std::string& error) {
    topk = shape.topk;
    row_vectors = shape.hidden * 2 / 16;
    // As an LL launch splits one token's row.
    slices = kernels::ll_slice_count(blocks, 1);
    std::vector<int> host(topk);
    for (int j = 0; j < topk; ++j) host[j] = static_cast<int>(static_cast<int64_t>(j) * shape.experts / topk);
    const size_t row_bytes = static_cast<size_t>(row_vectors) * 16;
    if (!ids.allocate(host.size() * sizeof(int), "cudaMalloc routed-row ids", error) ||
        !row.allocate(row_bytes, "cudaMalloc routed-row row", error) ||
        !out.allocate(row_bytes * static_cast<size_t>(shape.experts), "cudaMalloc routed-row rows", error)) {
      return false;
    }
    TRY_CUDA(cudaMemcpy(ids.ptr, host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice),
             "copying the routed row's ids");
    TRY_CUDA(cudaMemset(row.ptr, 0x3c, row_bytes), "filling the routed row");
    return true;
  }

  bool launch(int blocks, cudaStream_t stream, std::string& error) const {
    routed_row_kernel<<<blocks, kernels::kLlThreads, 0, stream>>>(
        static_cast<const int*>(ids.ptr), static_cast<const int4*>(row.ptr), static_cast<int4*>(out.ptr), topk,
        row_vectors, slices);
    TRY_CUDA(cudaGetLastError(), "launching the routed row of the latency floor");
    return true;
  }
};

// The floor inside graph replays: `iters` pairs of empty kernels captured into one graph,
// replayed twice under the tracer (the first replay uploads the graph and is not counted);
// `call` each kernel's span, `step` each pair's. A replay's kernels follow one another with
// no host between them, so this is the floor of the cupti_graph columns, which an eager pair
// (paced by the host's launches) is not.
bool graph_floor(RankSession& session, KernelTracer& tracer, const L2Sweep* sweep, int blocks, int iters, Summary& call,
                 Summary& step, std::string& problem, std::string& error) {
  const cudaStream_t st = session.stream();
  // A pair is a step of two empty launches.
  const StepHalf empty = [&](StepMarks*, int, std::string& e) { return launch_empty(blocks, st, e); };
  const StepCalls pair{empty, empty};
  CapturedSteps captured;
  if (!captured.capture(st, iters, sweep != nullptr ? with_sweeps(pair, *sweep, st) : pair, error)) return false;
  if (!tracer.usable() || !tracer.start(problem)) {
    if (problem.empty()) problem = "the kernel tracer stopped working earlier in the run";
    return true;
  }
  GraphExec replays;
  cudaError_t replayed = cudaGraphInstantiate(&replays.exec, captured.graph(), 0);
  for (int replay = 0; replay < 2 && replayed == cudaSuccess; ++replay) replayed = cudaGraphLaunch(replays.exec, st);
  const cudaError_t synced = cudaStreamSynchronize(st);
  std::vector<KernelRecord> kernels;
  std::vector<TagLink> links;
  const bool stopped = tracer.stop(kernels, links, problem);
  TRY_CUDA(replayed, "instantiating and replaying the graph floor");
  TRY_CUDA(synced, "running the graph floor's replays");
  if (!stopped) return true;
  std::vector<KernelRecord> ours;
  for (const KernelRecord& k : kernels) {
    if (k.device != static_cast<uint32_t>(session.device()) || k.graph == 0) continue;
    if (!check_times(k, problem)) return true;
    ours.push_back(k);
  }
  const size_t per_replay = static_cast<size_t>(2 * iters);
  if (ours.size() != 2 * per_replay) {
    problem = "CUPTI reported " + std::to_string(ours.size()) + " kernels of the graph floor's two replays, not " +
              std::to_string(2 * per_replay);
    return true;
  }
  std::stable_sort(ours.begin(), ours.end(),
                   [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  std::vector<double> calls, pairs;
  for (size_t i = per_replay; i < ours.size(); ++i) {
    calls.push_back(static_cast<double>(ours[i].end_ns - ours[i].start_ns) / 1e3);
  }
  for (size_t i = per_replay; i + 1 < ours.size(); i += 2) {
    pairs.push_back(static_cast<double>(ours[i + 1].end_ns - ours[i].start_ns) / 1e3);
  }
  call = summarize(calls);
  step = summarize(pairs);
  return true;
}

}  // namespace

int ll_block_threads() { return kernels::kLlThreads; }

bool measure_latency_floor(RankSession& session, KernelTracer& tracer, const L2Sweep* sweep, int blocks, int iters,
                           const RoutedRowShape& shape, Summary& call, Summary& step, Summary& routed_row,
                           Summary& graph_call, Summary& graph_step, std::string& problem, std::string& error) {
  const cudaStream_t st = session.stream();
  if (blocks < 1 || iters < 1 || shape.hidden < 8 || shape.hidden % 8 != 0 || shape.topk < 1 ||
      shape.topk > kernels::kMaxTopk || shape.experts < 1) {
    problem = "the floor needs a grid, at least one step and a row to route (blocks " + std::to_string(blocks) +
              ", steps " + std::to_string(iters) + ", hidden " + std::to_string(shape.hidden) + ", top-k " +
              std::to_string(shape.topk) + ", experts " + std::to_string(shape.experts) + ")";
    return true;
  }
  RoutedRow routed;
  if (!routed.setup(shape, blocks, error)) return false;
  for (int i = 0; i < kUntimedLaunches; ++i) {
    if (!launch_empty(blocks, st, error) || !routed.launch(blocks, st, error)) return false;
  }
  TRY_CUDA(cudaStreamSynchronize(st), "running the untimed kernels of the latency floor");
  // Each step: mark 0, a kernel (part 0), mark 1, a kernel (part 1), mark 2, the routed row
  // (part 2), mark 3 (the end). A sweep is no kernel: the spans leave it out.
  const auto swept = [&](std::string& e) { return sweep == nullptr || sweep->run(st, e); };
  const auto steps = [&](StepMarks& marks, std::string& e) {
    for (int i = 0; i < iters; ++i) {
      if (!swept(e)) return false;
      marks.record(i, 0, st);
      if (!launch_empty(blocks, st, e)) return false;
      marks.record(i, 1, st);
      if (!launch_empty(blocks, st, e)) return false;
      if (!swept(e)) return false;
      marks.record(i, 2, st);
      if (!routed.launch(blocks, st, e)) return false;
      marks.record(i, 3, st);
    }
    return true;
  };
  std::map<uint64_t, KernelSpan> by_tag;
  if (!record_pass(session, tracer, 3, steps, by_tag, problem, error)) return false;
  std::vector<double> first, second, both, routed_spans;
  if (problem.empty() && iteration_spans(by_tag, iters, {0}, first, problem) &&
      iteration_spans(by_tag, iters, {1}, second, problem) && iteration_spans(by_tag, iters, {0, 1}, both, problem) &&
      iteration_spans(by_tag, iters, {2}, routed_spans, problem)) {
    first.insert(first.end(), second.begin(), second.end());
    call = summarize(first);
    step = summarize(both);
    routed_row = summarize(routed_spans);
  }
  if (!problem.empty()) return true;
  return graph_floor(session, tracer, sweep, blocks, iters, graph_call, graph_step, problem, error);
}

}  // namespace epc::bench
