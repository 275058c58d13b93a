// Our low-latency dispatch and combine, timed three ways per point:
//  kernel: CUDA events before and after each call on the stream, `iters` back-to-back steps
//          after `warmup` (no host synchronisation between steps, as a decode loop runs);
//  api:    the host clock from the call until cudaStreamSynchronize returns, one op at a time
//          (what a caller that waits for the result sees, launch overhead included);
//  graph:  `iters` steps captured in one CUDA graph; each replay timed with events, divided
//          by `iters`.
// After the kernel-timed steps the outputs are checked (bench/output_check.hpp).
#include <cuda_runtime.h>

#include <cstring>
#include <initializer_list>

#include "bench/device_fill.hpp"
#include "bench/mode.hpp"
#include "bench/output_check.hpp"
#include "bench/try_call.hpp"
#include "epcomm/epcomm.h"

namespace epc::bench {
namespace {

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

struct DeviceBuffer {
  void* ptr = nullptr;
  ~DeviceBuffer() { release(); }
  void release() {
    if (ptr != nullptr) cudaFree(ptr);
    ptr = nullptr;
  }
  bool allocate(size_t bytes, const char* what, std::string& error) {
    release();
    const cudaError_t c = cudaMalloc(&ptr, bytes == 0 ? 16 : bytes);
    if (c != cudaSuccess) {
      ptr = nullptr;
      error = cuda_error(what, c);
      return false;
    }
    return true;
  }
};

// Mark indices of one step: start, dispatch queued (send-only), dispatch done, combine
// queued (send-only), combine done.
enum Mark { kStart, kDispatchSent, kDispatchDone, kCombineSent, kCombineDone, kMarks };

struct StepTensors {
  EpcTensor x, w, out_x, out_scales, counts, y, out;
};

class LlMode final : public Mode {
 public:
  ~LlMode() override { teardown(); }

  bool setup(RankSession& session, const Options& options, std::string& error) override {
    s_ = &session;
    o_ = options;
    fp8_ = o_.dtype == "fp8";
    R_ = session.nranks();
    T_ = o_.group_max_tokens();
    H_ = o_.hidden;
    K_ = o_.topk;
    EpcGroupConfig cfg = EPC_GROUP_CONFIG_INIT;
    cfg.mode = EPC_MODE_LOW_LATENCY;
    cfg.num_experts = static_cast<uint32_t>(o_.experts);
    cfg.hidden = static_cast<uint32_t>(H_);
    cfg.max_tokens_per_rank = static_cast<uint32_t>(T_);
    cfg.max_topk = static_cast<uint32_t>(K_);
    cfg.dtype = fp8_ ? EPC_DTYPE_FP8_E4M3 : EPC_DTYPE_BF16;
    cfg.num_sms = static_cast<uint32_t>(o_.sms);
    cfg.timeout_ms = static_cast<uint32_t>(o_.timeout_ms);
    TRY_EPC(epc_group_create(session.comm(), &cfg, &group_), "epc_group_create");
    std::memset(&info_, 0, sizeof info_);
    info_.struct_size = sizeof info_;
    info_.abi_version = EPC_ABI_VERSION;
    TRY_EPC(epc_group_query(group_, &info_), "epc_group_query");
    std::memset(&plan_, 0, sizeof plan_);
    plan_.struct_size = sizeof plan_;
    plan_.abi_version = EPC_ABI_VERSION;
    TRY_EPC(epc_plan_query(&cfg, R_, info_.lsa_size, info_.num_nodes, &plan_), "epc_plan_query");
    L_ = static_cast<int>(info_.local_experts);

    const size_t rows = static_cast<size_t>(L_) * R_ * T_;
    const size_t x_element = fp8_ ? 1 : 2;
    if (!x_.allocate(static_cast<size_t>(T_) * H_ * 2, "cudaMalloc x", error) ||
        !w_.allocate(static_cast<size_t>(T_) * K_ * 4, "cudaMalloc topk_weights", error) ||
        !idx_.allocate(static_cast<size_t>(T_) * K_ * 8, "cudaMalloc topk_idx", error) ||
        !out_x_.allocate(rows * H_ * x_element, "cudaMalloc out_x", error) ||
        !counts_.allocate(static_cast<size_t>(L_) * 4, "cudaMalloc out_counts", error) ||
        !y_.allocate(rows * H_ * 2, "cudaMalloc expert outputs", error) ||
        !out_.allocate(static_cast<size_t>(T_) * H_ * 2, "cudaMalloc combine output", error)) {
      return false;
    }
    if (fp8_ && !out_scales_.allocate(rows * (H_ / 128) * 4, "cudaMalloc out_scales", error)) return false;
    // Expert outputs of 1.0 make combine's result predictable (bench/output_check.hpp).
    TRY_CUDA(fill_u16(x_.ptr, kBf16One, static_cast<size_t>(T_) * H_, s_->stream()), "filling x");
    TRY_CUDA(fill_u16(y_.ptr, kBf16One, rows * H_, s_->stream()), "filling expert outputs");
    TRY_CUDA(cudaStreamSynchronize(s_->stream()), "filling buffers");
    return true;
  }

  GroupFacts facts() const override {
    GroupFacts f;
    f.symmetric_bytes = info_.symmetric_bytes;
    f.workspace_bytes = info_.workspace_bytes;
    f.message_bytes = plan_.message_bytes;
    f.num_sms = info_.num_sms;
    f.local_experts = info_.local_experts;
    f.max_tokens = info_.max_tokens_per_rank;
    return f;
  }

  WireFormat wire() const override { return WireFormat::for_dtype(H_, fp8_); }

  bool measure(const PointInput& in, MetricList& out, bool& checked, std::string& error) override {
    checked = false;
    const int B = in.tokens;
    const cudaStream_t st = s_->stream();
    std::vector<float> weights(static_cast<size_t>(B) * K_, 1.0f / static_cast<float>(K_));
    TRY_CUDA(cudaMemcpyAsync(idx_.ptr, in.routing->data(), in.routing->size() * 8,
                             cudaMemcpyHostToDevice, st), "uploading topk_idx");
    TRY_CUDA(cudaMemcpyAsync(w_.ptr, weights.data(), weights.size() * 4, cudaMemcpyHostToDevice, st),
             "uploading topk_weights");
    EpcTensor idx = tensor(idx_.ptr, EPC_DTYPE_INT64, {B, K_});
    EpcHandle* handle = nullptr;
    const EpcStatus created = epc_handle_create(group_, &idx, st, &handle);
    std::string create_error = created == EPC_OK ? "" : epc_error("epc_handle_create", created);
    const cudaError_t synced = cudaStreamSynchronize(st);
    if (created == EPC_OK && synced != cudaSuccess) create_error = cuda_error("uploading routing", synced);
    // No rank may start a collective step that a peer will never join.
    if (!s_->all_true(create_error.empty())) {
      epc_handle_destroy(handle);
      error = create_error.empty() ? "another rank could not create its handle" : create_error;
      return false;
    }
    const bool ok = measure_with(handle, B, in, out, checked, error);
    const EpcStatus destroyed = epc_handle_destroy(handle);
    if (ok && destroyed != EPC_OK) {
      error = epc_error("epc_handle_destroy", destroyed);
      return false;
    }
    return ok;
  }

  void teardown() override {
    if (group_ != nullptr) epc_group_destroy(group_);
    group_ = nullptr;
    for (DeviceBuffer* b : {&x_, &w_, &idx_, &out_x_, &out_scales_, &counts_, &y_, &out_}) b->release();
  }

 private:
  StepTensors tensors(int B) const {
    const int64_t RT = static_cast<int64_t>(R_) * T_;
    StepTensors t;
    t.x = tensor(x_.ptr, EPC_DTYPE_BF16, {B, H_});
    t.w = tensor(w_.ptr, EPC_DTYPE_FP32, {B, K_});
    t.out_x = tensor(out_x_.ptr, fp8_ ? EPC_DTYPE_FP8_E4M3 : EPC_DTYPE_BF16, {L_, RT, H_});
    t.out_scales = tensor(out_scales_.ptr, EPC_DTYPE_FP32, {L_, RT, H_ / 128});
    t.counts = tensor(counts_.ptr, EPC_DTYPE_INT32, {L_});
    t.y = tensor(y_.ptr, EPC_DTYPE_BF16, {L_, RT, H_});
    t.out = tensor(out_.ptr, EPC_DTYPE_BF16, {B, H_});
    return t;
  }

  EpcStatus call_dispatch(EpcHandle* h, const StepTensors& t, EpcFlags flags) const {
    if (fp8_) {
      if (o_.pow2_scales) flags |= EPC_FLAG_FP8_POW2_SCALES;
      return epc_ll_dispatch_fp8(h, &t.x, &t.w, &t.out_x, &t.out_scales, &t.counts, flags,
                                 s_->stream());
    }
    return epc_ll_dispatch(h, &t.x, &t.w, &t.out_x, &t.counts, flags, s_->stream());
  }

  // One dispatch (send + complete with --send-only), recording marks when given.
  bool dispatch(EpcHandle* h, const StepTensors& t, EventMarks* m, int iter, std::string& error) {
    const cudaStream_t st = s_->stream();
    if (m) m->record(iter, kStart, st);
    if (o_.send_only) {
      TRY_EPC(call_dispatch(h, t, EPC_FLAG_SEND_ONLY), "dispatch (send-only)");
      if (m) m->record(iter, kDispatchSent, st);
      TRY_EPC(epc_complete(h, st), "epc_complete after dispatch");
    } else {
      TRY_EPC(call_dispatch(h, t, 0), "dispatch");
    }
    if (m) m->record(iter, kDispatchDone, st);
    return true;
  }

  bool combine(EpcHandle* h, const StepTensors& t, EventMarks* m, int iter, std::string& error) {
    const cudaStream_t st = s_->stream();
    if (o_.send_only) {
      TRY_EPC(epc_ll_combine(h, &t.y, &t.out, EPC_FLAG_SEND_ONLY, st), "epc_ll_combine (send-only)");
      if (m) m->record(iter, kCombineSent, st);
      TRY_EPC(epc_complete(h, st), "epc_complete after combine");
    } else {
      TRY_EPC(epc_ll_combine(h, &t.y, &t.out, 0, st), "epc_ll_combine");
    }
    if (m) m->record(iter, kCombineDone, st);
    return true;
  }

  bool measure_with(EpcHandle* h, int B, const PointInput& in, MetricList& out, bool& checked,
                    std::string& error) {
    const StepTensors t = tensors(B);
    const cudaStream_t st = s_->stream();
    for (int i = 0; i < o_.warmup; ++i) {
      if (!dispatch(h, t, nullptr, 0, error) || !combine(h, t, nullptr, 0, error)) return false;
    }
    EventMarks marks(o_.iters, kMarks);
    if (!marks.ok()) {
      error = "cudaEventCreate failed";
      return false;
    }
    for (int i = 0; i < o_.iters; ++i) {
      if (!dispatch(h, t, &marks, i, error) || !combine(h, t, &marks, i, error)) return false;
    }
    TRY_CUDA(cudaStreamSynchronize(st), "running the timed steps");
    struct Span {
      const char* name;
      Mark from, to;
      bool send_only;
    };
    const Span spans[] = {{"ours.kernel.dispatch", kStart, kDispatchDone, false},
                          {"ours.kernel.combine", kDispatchDone, kCombineDone, false},
                          {"ours.kernel.step", kStart, kCombineDone, false},
                          {"ours.kernel.dispatch_send", kStart, kDispatchSent, true},
                          {"ours.kernel.dispatch_complete", kDispatchSent, kDispatchDone, true},
                          {"ours.kernel.combine_send", kDispatchDone, kCombineSent, true},
                          {"ours.kernel.combine_complete", kCombineSent, kCombineDone, true}};
    for (const Span& span : spans) {
      if (span.send_only && !o_.send_only) continue;
      std::vector<double> us;
      if (!marks.elapsed_us(span.from, span.to, us)) {
        error = std::string("reading the CUDA events of ") + span.name;
        return false;
      }
      out.emplace_back(span.name, summarize(us));
    }
    // Agreed, so that a rank with wrong results does not leave its peers waiting in the next
    // step until their timeout.
    const bool right = check_outputs(B, in, error);
    if (!s_->all_true(right)) {
      if (right) error = "another rank got wrong results";
      return false;
    }
    checked = true;
    if (!time_api(h, t, out, error)) return false;
    if (o_.graph && !time_graph(h, t, out, error)) return false;
    return true;
  }

  bool check_outputs(int B, const PointInput& in, std::string& error) {
    std::vector<int32_t> counts(static_cast<size_t>(L_));
    std::vector<uint16_t> combined(static_cast<size_t>(B) * H_);
    TRY_CUDA(cudaMemcpy(counts.data(), counts_.ptr, counts.size() * 4, cudaMemcpyDeviceToHost),
             "reading out_counts");
    TRY_CUDA(cudaMemcpy(combined.data(), out_.ptr, combined.size() * 2, cudaMemcpyDeviceToHost),
             "reading the combine output");
    std::string why;
    if (!check_counts(counts, in.traffic->expected_counts, why) ||
        !check_combined(combined, B, H_,
                        expected_combine(*in.routing, B, K_, L_, R_, /*per_rank_partials=*/true), why)) {
      error = "wrong results, so no times are reported: " + why;
      return false;
    }
    return true;
  }

  bool time_api(EpcHandle* h, const StepTensors& t, MetricList& out, std::string& error) {
    const cudaStream_t st = s_->stream();
    std::vector<double> d_total, c_total, step, d_call, c_call;
    TRY_CUDA(cudaStreamSynchronize(st), "before the API timing");
    for (int i = 0; i < o_.iters; ++i) {
      const Clock::time_point t0 = Clock::now();
      if (!dispatch(h, t, nullptr, 0, error)) return false;
      const Clock::time_point t1 = Clock::now();
      TRY_CUDA(cudaStreamSynchronize(st), "dispatch (API timing)");
      const Clock::time_point t2 = Clock::now();
      if (!combine(h, t, nullptr, 0, error)) return false;
      const Clock::time_point t3 = Clock::now();
      TRY_CUDA(cudaStreamSynchronize(st), "combine (API timing)");
      const Clock::time_point t4 = Clock::now();
      d_total.push_back(us_between(t0, t2));
      c_total.push_back(us_between(t2, t4));
      step.push_back(us_between(t0, t4));
      d_call.push_back(us_between(t0, t1));
      c_call.push_back(us_between(t2, t3));
    }
    out.emplace_back("ours.api.dispatch", summarize(d_total));
    out.emplace_back("ours.api.combine", summarize(c_total));
    out.emplace_back("ours.api.step", summarize(step));
    out.emplace_back("ours.api.dispatch_call", summarize(d_call));
    out.emplace_back("ours.api.combine_call", summarize(c_call));
    return true;
  }

  bool time_graph(EpcHandle* h, const StepTensors& t, MetricList& out, std::string& error) {
    const cudaStream_t st = s_->stream();
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::string capture_error;
    // Thread-local: NCCL's own threads may make CUDA calls meanwhile, which global mode forbids.
    cudaError_t c = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
    if (c != cudaSuccess) {
      capture_error = cuda_error("cudaStreamBeginCapture", c);
    } else {
      for (int i = 0; i < o_.iters && capture_error.empty(); ++i) {
        if (!dispatch(h, t, nullptr, 0, capture_error)) break;
        if (!combine(h, t, nullptr, 0, capture_error)) break;
      }
      c = cudaStreamEndCapture(st, &graph);
      if (c != cudaSuccess && capture_error.empty()) capture_error = cuda_error("cudaStreamEndCapture", c);
    }
    if (capture_error.empty()) {
      c = cudaGraphInstantiate(&exec, graph, 0);
      if (c != cudaSuccess) capture_error = cuda_error("cudaGraphInstantiate", c);
    }
    if (!capture_error.empty()) cudaGetLastError();  // leave no stale error behind
    // Replays are collective: every rank replays or none does.
    const bool everyone = s_->all_true(capture_error.empty());
    bool ok = everyone;
    if (!everyone) error = capture_error.empty() ? "graph capture failed on another rank" : capture_error;
    std::vector<double> per_step;
    if (ok) {
      EventMarks marks(o_.graph_replays, 2);
      // One untimed replay first: the first launch of an executable graph uploads it.
      ok = cudaGraphLaunch(exec, st) == cudaSuccess;
      for (int i = 0; ok && i < o_.graph_replays; ++i) {
        marks.record(i, 0, st);
        ok = cudaGraphLaunch(exec, st) == cudaSuccess;
        marks.record(i, 1, st);
      }
      c = cudaStreamSynchronize(st);
      std::vector<double> us;
      if (!ok || c != cudaSuccess || !marks.ok() || !marks.elapsed_us(0, 1, us)) {
        ok = false;
        error = cuda_error("replaying the captured graph", c == cudaSuccess ? cudaGetLastError() : c);
      }
      for (double v : us) per_step.push_back(v / o_.iters);
    }
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (ok) out.emplace_back("ours.graph.step", summarize(per_step));
    return ok;
  }

  RankSession* s_ = nullptr;
  Options o_;
  bool fp8_ = false;
  int R_ = 0, T_ = 0, H_ = 0, K_ = 0, L_ = 0;
  EpcGroup* group_ = nullptr;
  EpcGroupInfo info_{};
  EpcPlan plan_{};
  DeviceBuffer x_, w_, idx_, out_x_, out_scales_, counts_, y_, out_;
};

}  // namespace

std::unique_ptr<Mode> make_ll_mode() { return std::make_unique<LlMode>(); }

bool ll_dtype_supported(const std::string& dtype, std::string& why) {
  if (dtype == "bf16" || dtype == "fp8") return true;
  why = "unknown dtype '" + dtype + "'";
  return false;
}

}  // namespace epc::bench
