// SPDX-License-Identifier: Apache-2.0
#include "bench/mode_support.hpp"

#include <cstring>
#include <vector>

#include "bench/cupti_timing.hpp"
#include "bench/l2_sweep.hpp"
#include "bench/try_call.hpp"

namespace epc::bench {

TokenFormat token_format(const Options& o) {
  const int64_t H = o.hidden;
  if (o.quant == "passthrough") {
    const bool e2m1 = o.payload == "e2m1";
    const EpcDtype scale_dtype = o.scales == "bf16"           ? EPC_DTYPE_BF16
                                 : o.scales == "ue8m0"        ? EPC_DTYPE_E8M0
                                 : o.scales == "ue8m0-packed" ? EPC_DTYPE_E8M0X4
                                 : o.scales == "uint8"        ? EPC_DTYPE_UINT8
                                                              : EPC_DTYPE_FP32;
    const int64_t S = o.passthrough_scale_count();
    return TokenFormat{static_cast<EpcDtype>(e2m1 ? EPC_DTYPE_FP4_E2M1X2 : EPC_DTYPE_FP8_E4M3),
                       e2m1 ? H / 2 : H,
                       o.passthrough_row_bytes(),
                       scale_dtype,
                       S,
                       S * o.passthrough_scale_element_bytes()};
  }
  if (o.dtype == "fp8") return TokenFormat{EPC_DTYPE_FP8_E4M3, H, H, EPC_DTYPE_FP32, H / 128, H / 128 * 4};
  return TokenFormat{EPC_DTYPE_BF16, H, 2 * H, EPC_DTYPE_INVALID, 0, 0};
}

EpcGroupConfig group_config(const Options& o, EpcMode mode) {
  EpcGroupConfig cfg = EPC_GROUP_CONFIG_INIT;
  cfg.mode = mode;
  cfg.num_experts = static_cast<uint32_t>(o.experts);
  cfg.hidden = static_cast<uint32_t>(o.hidden);
  cfg.max_tokens_per_rank = static_cast<uint32_t>(o.group_max_tokens());
  cfg.max_topk = static_cast<uint32_t>(o.topk);
  // fp8 runs size the window for fp8 rows only (1.3's fp8 group): the row plus one fp32
  // scale per 128 channels.
  if (o.dtype == "fp8") cfg.max_token_bytes = cfg.hidden + cfg.hidden / 32;
  // Passthrough: the default window (2 * hidden) unless row and scales need more.
  const TokenFormat f = token_format(o);
  if (o.quant == "passthrough" && f.row_bytes + f.scale_bytes > 2 * int64_t{cfg.hidden}) {
    cfg.max_token_bytes = static_cast<uint32_t>(f.row_bytes + f.scale_bytes);
  }
  cfg.num_sms = static_cast<uint32_t>(o.sms);
  cfg.timeout_ms = static_cast<uint32_t>(o.timeout_ms);
  cfg.virtual_node_size = static_cast<uint32_t>(o.virtual_node_size);
  // Weights at combine (EPC_WEIGHTING_HOME) need a row per (token, entry) in the window.
  if (o.weights_at == "combine") cfg.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  return cfg;
}

bool OurGroup::create(RankSession& session, const EpcGroupConfig& cfg, std::string& error) {
  destroy();
  TRY_EPC(epc_group_create(session.comm(), &cfg, &group_), "epc_group_create");
  std::memset(&info_, 0, sizeof info_);
  info_.struct_size = sizeof info_;
  info_.abi_version = EPC_ABI_VERSION;
  TRY_EPC(epc_group_query(group_, &info_), "epc_group_query");
  std::memset(&plan_, 0, sizeof plan_);
  plan_.struct_size = sizeof plan_;
  plan_.abi_version = EPC_ABI_VERSION;
  // The plan query takes the NVLink (LSA) domains, not the nodes epcomm uses: with virtual
  // nodes info_.num_nodes counts those, and lsa_size * num_nodes would not be the rank count.
  const int lsa_domains = info_.lsa_size > 0 ? session.nranks() / info_.lsa_size : 1;
  TRY_EPC(epc_plan_query(&cfg, session.nranks(), info_.lsa_size, lsa_domains, &plan_), "epc_plan_query");
  return true;
}

void OurGroup::destroy() {
  if (group_ != nullptr) epc_group_destroy(group_);
  group_ = nullptr;
}

GroupFacts OurGroup::facts() const {
  GroupFacts f;
  f.symmetric_bytes = info_.symmetric_bytes;
  f.planned_symmetric_bytes = plan_.symmetric_bytes;
  f.workspace_bytes = info_.workspace_bytes;
  f.message_bytes = plan_.message_bytes;
  f.num_sms = info_.num_sms;
  f.local_experts = info_.local_experts;
  f.max_tokens = info_.max_tokens_per_rank;
  f.num_nodes = static_cast<uint32_t>(info_.num_nodes);
  f.recv_capacity = info_.recv_capacity;
  return f;
}

LlScaleLayout ll_scale_layout(const std::string& scales, int64_t experts, int64_t rows, int64_t scales_per_row,
                              const TokenFormat* passthrough) {
  LlScaleLayout l;
  const bool packed = scales == "ue8m0-packed" || scales == "ue8m0-packed-rowmajor";
  const bool column_major = scales == "ue8m0-packed" || scales == "fp32-colmajor";
  l.dtype = packed ? EPC_DTYPE_E8M0X4 : scales == "ue8m0" ? EPC_DTYPE_E8M0 : EPC_DTYPE_FP32;
  int64_t element = l.dtype == EPC_DTYPE_E8M0 ? 1 : 4;
  int64_t words = packed ? (scales_per_row + 3) / 4 : scales_per_row;
  if (passthrough != nullptr) {  // the caller's elements, as many as it made
    l.dtype = passthrough->scale_dtype;
    element = passthrough->scale_bytes / passthrough->scale_count;
    words = passthrough->scale_count;
  }
  l.shape[0] = experts;
  l.shape[1] = rows;
  l.shape[2] = words;
  if (column_major) {
    const int64_t column = (rows + 16 / element - 1) / (16 / element) * (16 / element);
    l.strides[0] = words * column;
    l.strides[1] = 1;
    l.strides[2] = column;
  } else {
    l.strides[0] = rows * words;
    l.strides[1] = words;
    l.strides[2] = 1;
  }
  l.bytes = static_cast<size_t>(experts * l.strides[0] * element);
  return l;
}

EpcTensor LlScaleLayout::tensor(void* data) const {
  EpcTensor t = ::epc::bench::tensor(data, dtype, {shape[0], shape[1], shape[2]});
  for (int i = 0; i < 3; ++i) t.strides[i] = strides[i];
  return t;
}

EpcTensor tensor(void* data, EpcDtype dtype, std::initializer_list<int64_t> shape) {
  EpcTensor t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  return t;
}

void DeviceBuffer::release() {
  if (ptr != nullptr) cudaFree(ptr);
  ptr = nullptr;
}

bool DeviceBuffer::allocate(size_t bytes, const char* what, std::string& error) {
  release();
  const cudaError_t c = cudaMalloc(&ptr, bytes == 0 ? 16 : bytes);
  if (c != cudaSuccess) {
    ptr = nullptr;
    error = cuda_error(what, c);
    return false;
  }
  return true;
}

const StepSpan kStepSpans[7] = {{"dispatch", kStart, kDispatchDone, false},
                                {"combine", kDispatchDone, kCombineDone, false},
                                {"step", kStart, kCombineDone, false},
                                {"dispatch_send", kStart, kDispatchSent, true},
                                {"dispatch_complete", kDispatchSent, kDispatchDone, true},
                                {"combine_send", kDispatchDone, kCombineSent, true},
                                {"combine_complete", kCombineSent, kCombineDone, true}};

bool time_kernels(const std::string& who, cudaStream_t st, int warmup, int iters, bool send_only, const StepCalls& step,
                  MetricList& out, std::string& error) {
  for (int i = 0; i < warmup; ++i) {
    if (!step.dispatch(nullptr, 0, error) || !step.combine(nullptr, 0, error)) return false;
  }
  EventMarks marks(iters, kStepMarks);
  if (!marks.ok()) {
    error = "cudaEventCreate failed";
    return false;
  }
  for (int i = 0; i < iters; ++i) {
    if (!step.dispatch(&marks, i, error) || !step.combine(&marks, i, error)) return false;
  }
  TRY_CUDA(cudaStreamSynchronize(st), "running the timed steps");
  for (const StepSpan& span : kStepSpans) {
    if (span.send_only && !send_only) continue;
    const std::string name = who + ".kernel." + span.name;
    std::vector<double> us;
    if (!marks.elapsed_us(span.from, span.to, us)) {
      error = "reading the CUDA events of " + name;
      return false;
    }
    out.emplace_back(name, summarize(us));
  }
  return true;
}

bool time_api(const std::string& who, cudaStream_t st, int iters, const StepCalls& step, MetricList& out,
              std::string& error) {
  std::vector<double> d_total, c_total, total, d_call, c_call;
  TRY_CUDA(cudaStreamSynchronize(st), "before the API timing");
  for (int i = 0; i < iters; ++i) {
    const Clock::time_point t0 = Clock::now();
    if (!step.dispatch(nullptr, 0, error)) return false;
    const Clock::time_point t1 = Clock::now();
    TRY_CUDA(cudaStreamSynchronize(st), "dispatch (API timing)");
    const Clock::time_point t2 = Clock::now();
    if (!step.combine(nullptr, 0, error)) return false;
    const Clock::time_point t3 = Clock::now();
    TRY_CUDA(cudaStreamSynchronize(st), "combine (API timing)");
    const Clock::time_point t4 = Clock::now();
    d_total.push_back(us_between(t0, t2));
    c_total.push_back(us_between(t2, t4));
    total.push_back(us_between(t0, t4));
    d_call.push_back(us_between(t0, t1));
    c_call.push_back(us_between(t2, t3));
  }
  out.emplace_back(who + ".api.dispatch", summarize(d_total));
  out.emplace_back(who + ".api.combine", summarize(c_total));
  out.emplace_back(who + ".api.step", summarize(total));
  out.emplace_back(who + ".api.dispatch_call", summarize(d_call));
  out.emplace_back(who + ".api.combine_call", summarize(c_call));
  return true;
}

CapturedSteps::~CapturedSteps() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
}

bool CapturedSteps::capture(cudaStream_t st, int iters, const StepCalls& step, std::string& error) {
  std::string capture_error;
  // Thread-local: NCCL's own threads may make CUDA calls meanwhile, which global mode forbids.
  cudaError_t c = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
  if (c != cudaSuccess) {
    capture_error = cuda_error("cudaStreamBeginCapture", c);
  } else {
    for (int i = 0; i < iters && capture_error.empty(); ++i) {
      if (!step.dispatch(nullptr, 0, capture_error)) break;
      if (!step.combine(nullptr, 0, capture_error)) break;
    }
    c = cudaStreamEndCapture(st, &graph_);
    if (c != cudaSuccess && capture_error.empty()) capture_error = cuda_error("cudaStreamEndCapture", c);
  }
  if (capture_error.empty()) {
    c = cudaGraphInstantiate(&exec_, graph_, 0);
    if (c != cudaSuccess) capture_error = cuda_error("cudaGraphInstantiate", c);
  }
  if (capture_error.empty()) return true;
  cudaGetLastError();  // leave no stale error behind
  error = capture_error;
  return false;
}

bool time_graph(RankSession& session, int iters, int replays, const StepCalls& step, KernelTracer* tracer,
                const StepKernels& eager, bool swept, MetricList& out, std::string& error) {
  const cudaStream_t st = session.stream();
  CapturedSteps captured;
  std::string capture_error;
  const bool mine = captured.capture(st, iters, step, capture_error);
  // Replays are collective: every rank replays or none does.
  if (!session.all_true(mine)) {
    error = mine ? "graph capture failed on another rank" : capture_error;
    return false;
  }
  EventMarks marks(replays, 2);
  // One untimed replay first: the first launch of an executable graph uploads it.
  bool ok = cudaGraphLaunch(captured.exec(), st) == cudaSuccess;
  for (int i = 0; ok && i < replays; ++i) {
    marks.record(i, 0, st);
    ok = cudaGraphLaunch(captured.exec(), st) == cudaSuccess;
    marks.record(i, 1, st);
  }
  const cudaError_t c = cudaStreamSynchronize(st);
  std::vector<double> us;
  if (!ok || c != cudaSuccess || !marks.ok() || !marks.elapsed_us(0, 1, us)) {
    error = cuda_error("replaying the captured graph", c == cudaSuccess ? cudaGetLastError() : c);
    return false;
  }
  std::vector<double> per_step;
  for (double v : us) per_step.push_back(v / iters);
  if (!swept) out.emplace_back("ours.graph.step", summarize(per_step));
  return tracer == nullptr || time_cupti_graph(session, *tracer, captured.graph(), iters, replays, eager, out, error);
}

bool time_point(RankSession& session, const Options& options, const PointInput& in, const StepCalls& step,
                const std::function<bool(std::string& error)>& check, MetricList& out, bool& checked,
                std::string& error) {
  checked = false;
  const cudaStream_t st = session.stream();
  // The API timing (host clocks around each call) stays warm: a sweep would be inside it.
  const StepCalls timed = in.sweep != nullptr ? with_sweeps(step, *in.sweep, st) : step;
  if (!time_kernels("ours", st, in.warmup, in.iters, options.send_only, timed, out, error)) return false;
  if (step.after_kernel_timing && !step.after_kernel_timing(in.iters, out, error)) return false;
  const bool right = check(error);
  if (!session.all_true(right)) {
    if (right) error = "another rank got wrong results";
    return false;
  }
  checked = true;
  if (!time_api("ours", st, in.iters, step, out, error)) return false;
  StepKernels eager;
  if (in.tracer != nullptr &&
      !time_cupti_steps(session, *in.tracer, in.warmup, in.iters, options.send_only, timed, out, eager, error)) {
    return false;
  }
  return !options.graph ||
         time_graph(session, in.iters, options.graph_replays, timed, in.tracer, eager, in.sweep != nullptr, out, error);
}

bool upload_routing(RankSession& session, const PointInput& in, int topk, void* topk_idx, void* topk_weights,
                    std::string& error) {
  const cudaStream_t st = session.stream();
  const std::vector<float> weights(static_cast<size_t>(in.tokens) * topk, 1.0f / static_cast<float>(topk));
  TRY_CUDA(cudaMemcpyAsync(topk_idx, in.routing->data(), in.routing->size() * 8, cudaMemcpyHostToDevice, st),
           "uploading topk_idx");
  TRY_CUDA(cudaMemcpyAsync(topk_weights, weights.data(), weights.size() * 4, cudaMemcpyHostToDevice, st),
           "uploading topk_weights");
  // The weights live on this stack: wait before they go.
  TRY_CUDA(cudaStreamSynchronize(st), "uploading the routing");
  return true;
}

}  // namespace epc::bench
