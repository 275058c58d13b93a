// SPDX-License-Identifier: Apache-2.0
// What the modes (ll_mode.cpp, ht_mode.cpp) share: the group, tensor descriptors, device
// buffers, and the ways a step of ours is timed (the baseline uses the first two):
//  kernel: CUDA events before and after each call on the stream, `iters` back-to-back steps
//          after `warmup` (no host synchronisation between steps, as a serving loop runs);
//  api:    the host clock from the call until cudaStreamSynchronize returns, one op at a time
//          (what a caller that waits for the result sees, launch overhead included);
//  graph:  `iters` steps captured in one CUDA graph; each replay timed with events, divided
//          by `iters`;
//  cupti, cupti_graph: the GPU time of the kernels themselves, from CUPTI's records, in
//          passes of their own (bench/cupti_timing.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "bench/kernel_spans.hpp"
#include "bench/mode.hpp"
#include "bench/options.hpp"
#include "bench/rank_session.hpp"
#include "bench/record.hpp"
#include "bench/timing.hpp"
#include "epcomm/epcomm.h"

namespace epc::bench {

// What an HT dispatch carries per token (--dtype, or --quant=passthrough's --payload,
// --scales and --scale-count after defaults): x and its scales.
struct TokenFormat {
  EpcDtype x_dtype;
  int64_t columns;  // x's last dimension: hidden, or hidden / 2 for e2m1x2
  int64_t row_bytes;
  EpcDtype scale_dtype;  // EPC_DTYPE_INVALID: no scales
  int64_t scale_count;   // S per row
  int64_t scale_bytes;   // per row
};
TokenFormat token_format(const Options& o);

// The group configuration the flags ask for (sizes, dtype, SM budget, timeout) in `mode`.
EpcGroupConfig group_config(const Options& options, EpcMode mode);

// The group a mode measures, with what epc_group_query and epc_plan_query say about it.
class OurGroup {
 public:
  OurGroup() = default;
  OurGroup(const OurGroup&) = delete;
  OurGroup& operator=(const OurGroup&) = delete;
  ~OurGroup() { destroy(); }
  // Collective.
  bool create(RankSession& session, const EpcGroupConfig& config, std::string& error);
  // Collective; a no-op without a group.
  void destroy();
  EpcGroup* get() const { return group_; }
  const EpcGroupInfo& info() const { return info_; }
  GroupFacts facts() const;

 private:
  EpcGroup* group_ = nullptr;
  EpcGroupInfo info_{};
  EpcPlan plan_{};
};

// A contiguous tensor descriptor.
EpcTensor tensor(void* data, EpcDtype dtype, std::initializer_list<int64_t> shape);

// The out_scales of an LL fp8 dispatch as --scales names it: fp32 (row-major), fp32-colmajor
// (column-major over rows, each column padded to 16 bytes, as TMA loads it), ue8m0 (E8M0
// bytes, row-major), ue8m0-packed (E8M0X4 words, column-major, 16-byte columns: DeepGEMM's
// scale layout) or ue8m0-packed-rowmajor (E8M0X4 words, row-major), for `experts` x `rows`
// rows of `scales` scales.
struct LlScaleLayout {
  EpcDtype dtype = EPC_DTYPE_FP32;
  int64_t shape[3] = {0, 0, 0};
  int64_t strides[3] = {0, 0, 0};  // elements
  size_t bytes = 0;                // the allocation the strides span
  EpcTensor tensor(void* data) const;
};
// `passthrough` (--quant=passthrough, else null): out_scales of the caller's scale dtype and
// count, laid out as --scales says (column-major for fp32-colmajor and ue8m0-packed).
LlScaleLayout ll_scale_layout(const std::string& scales, int64_t experts, int64_t rows, int64_t scales_per_row,
                              const TokenFormat* passthrough = nullptr);

struct DeviceBuffer {
  void* ptr = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }
  void release();
  bool allocate(size_t bytes, const char* what, std::string& error);
};

// Mark indices of one step: start, dispatch queued (send-only), dispatch done, combine
// queued (send-only), combine done.
enum StepMark { kStart, kDispatchSent, kDispatchDone, kCombineSent, kCombineDone, kStepMarks };

// The spans of a step the kernel and CUPTI timings report, from one mark to a later one
// ("<who>.<how>.<name>"); the send-only ones only with --send-only.
struct StepSpan {
  const char* name;
  StepMark from, to;
  bool send_only;
};
extern const StepSpan kStepSpans[7];

// One half of a step (ours, or the baseline's): queues it on the stream and, when `marks` is
// given, records its marks at `iter`.
using StepHalf = std::function<bool(StepMarks* marks, int iter, std::string& error)>;
struct StepCalls {
  StepHalf dispatch;
  StepHalf combine;
  // Optional. Collective. What a mode reads back from the steps the kernel timing just ran
  // (their count is `steps`), called by time_point before anything else runs: the LL phase
  // trace in -Dphase_trace=true builds.
  std::function<bool(int steps, MetricList& out, std::string& error)> after_kernel_timing = nullptr;
};

// Appends <who>.kernel.{dispatch,combine,step} and, with `send_only`, each half's spans.
bool time_kernels(const std::string& who, cudaStream_t stream, int warmup, int iters, bool send_only,
                  const StepCalls& step, MetricList& out, std::string& error);
// Appends <who>.api.{dispatch,combine,step,dispatch_call,combine_call}.
bool time_api(const std::string& who, cudaStream_t stream, int iters, const StepCalls& step, MetricList& out,
              std::string& error);
// `iters` steps captured in one CUDA graph on `stream`, and its executable. Local.
class CapturedSteps {
 public:
  CapturedSteps() = default;
  ~CapturedSteps();
  CapturedSteps(const CapturedSteps&) = delete;
  CapturedSteps& operator=(const CapturedSteps&) = delete;
  // False with `error` when the capture or the instantiation failed (no error is left
  // pending in CUDA).
  bool capture(cudaStream_t stream, int iters, const StepCalls& step, std::string& error);
  cudaGraph_t graph() const { return graph_; }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Collective (every rank replays or none does). Appends ours.graph.step (unless `swept`: the
// steps hold L2 sweeps, which a replay's events would count) and, with a tracer,
// ours.cupti_graph.{step,dispatch,combine} (`eager`: what an eager step launched, 0 if unknown).
bool time_graph(RankSession& session, int iters, int replays, const StepCalls& step, KernelTracer* tracer,
                const StepKernels& eager, bool swept, MetricList& out, std::string& error);

// Collective. What every mode does at a point once its handle exists: the kernel timing,
// then `check` of the outputs those steps left (agreed by every rank, so that one with wrong
// results does not leave its peers waiting in the next step), then the API timing, the
// CUPTI timing (with `in.tracer`) and, with --graph, the graph replays. `checked` says
// whether the outputs were right.
bool time_point(RankSession& session, const Options& options, const PointInput& in, const StepCalls& step,
                const std::function<bool(std::string& error)>& check, MetricList& out, bool& checked,
                std::string& error);

// Copies the point's routing ([B, K] int64) into `topk_idx` and top-k weights of 1/K into
// `topk_weights` through the session's stream, and waits for the copies.
bool upload_routing(RankSession& session, const PointInput& in, int topk, void* topk_idx, void* topk_weights,
                    std::string& error);

}  // namespace epc::bench
