// SPDX-License-Identifier: Apache-2.0
// Our low-latency dispatch and combine, timed per point as bench/mode_support.hpp describes
// (kernel, api, CUPTI and, with --graph, graph replay; with --send-only each half
// separately). After the kernel-timed steps the outputs are checked (bench/output_check.hpp)
// and, in builds configured with -Dphase_trace=true, the phase trace of those steps is read.
// With --micro-batches=2 a second handle on the same routing (its own outputs) joins the first
// for the layer timing of bench/micro_batch_timing.hpp, whose outputs are checked too.
// --layout=rank-major|flat: the handles' layout, dispatch then also writes each received row's
// top-k ids and weights (shared by the micro-batches: the same routing writes the same values)
// and combine sums the rows as given. --weights-at=combine (expert-padded): combine weights
// on the token's rank (EPC_WEIGHTING_HOME, the routing's weights given again at combine), on a
// group with EPC_GROUP_COMBINE_PER_ENTRY.
// --quant=passthrough: x and x_scales are the caller's --payload rows and --scales, filled once
// with bytes that name their token (bench/output_check.hpp), so the check finds every row's
// bytes where the reference model puts them; e2m1 rows also pass NVFP4's x_global_scale.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/device_fill.hpp"
#include "bench/micro_batch_timing.hpp"
#include "bench/mode.hpp"
#include "bench/mode_support.hpp"
#include "bench/output_check.hpp"
#include "bench/try_call.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/limits.hpp"
#include "kernels/wire/ll_message.hpp"
#ifdef EPC_PHASE_TRACE
#include <memory>

#include "bench/cupti_timing.hpp"
#include "bench/phase_trace.hpp"
#include "capi/phase_trace.h"
#endif

namespace epc::bench {
namespace {

struct StepTensors {
  EpcTensor x, x_scales, global_scale, w, out_x, out_scales, counts, rank_counts, num_recv, out_idx, out_w, y, out;
};

class LlMode final : public Mode {
 public:
  ~LlMode() override { teardown(); }

  bool setup(RankSession& session, const Options& options, std::string& error) override {
    s_ = &session;
    o_ = options;
    fp8_ = o_.dtype == "fp8";
    pass_ = o_.quant == "passthrough";
    format_ = token_format(o_);
    home_ = o_.weights_at == "combine";
    layout_ = o_.layout == "rank-major" ? EPC_LAYOUT_RANK_MAJOR
              : o_.layout == "flat"     ? EPC_LAYOUT_FLAT
                                        : EPC_LAYOUT_EXPERT_PADDED;
    R_ = session.nranks();
    T_ = o_.group_max_tokens();
    H_ = o_.hidden;
    K_ = o_.topk;
    if (!group_.create(session, group_config(o_, EPC_MODE_LOW_LATENCY), error)) return false;
    L_ = static_cast<int>(group_.info().local_experts);

    const size_t rows = static_cast<size_t>(L_) * R_ * T_;
    // Bytes of an out_x row: bf16, the fp8 cast's e4m3, or the caller's passthrough row.
    const size_t out_row = pass_ ? static_cast<size_t>(format_.row_bytes) : static_cast<size_t>(H_) * (fp8_ ? 1 : 2);
    if (!x_.allocate(static_cast<size_t>(T_) * H_ * 2, "cudaMalloc x", error) ||
        !w_.allocate(static_cast<size_t>(T_) * K_ * 4, "cudaMalloc topk_weights", error) ||
        !idx_.allocate(static_cast<size_t>(T_) * K_ * 8, "cudaMalloc topk_idx", error) ||
        !out_x_.allocate(rows * out_row, "cudaMalloc out_x", error) ||
        !counts_.allocate(static_cast<size_t>(L_) * 4, "cudaMalloc out_counts", error) ||
        !rank_counts_.allocate(static_cast<size_t>(R_ + 1) * 4, "cudaMalloc out_rank_counts", error) ||
        !out_idx_.allocate(static_cast<size_t>(R_) * T_ * K_ * 4, "cudaMalloc out_topk_idx", error) ||
        !out_w_.allocate(static_cast<size_t>(R_) * T_ * K_ * 4, "cudaMalloc out_topk_weights", error) ||
        !y_.allocate(rows * H_ * 2, "cudaMalloc expert outputs", error) ||
        !out_.allocate(static_cast<size_t>(T_) * H_ * 2, "cudaMalloc combine output", error)) {
      return false;
    }
    // Zones of R x T rows per expert, of T rows per rank, or one of R x T rows (FLAT's 2-D
    // tensor drops that dimension: tensors()).
    const TokenFormat* caller = pass_ ? &format_ : nullptr;
    scales_ = layout_ == EPC_LAYOUT_RANK_MAJOR ? ll_scale_layout(o_.scales, R_, T_, H_ / 128, caller)
                                               : ll_scale_layout(o_.scales, layout_ == EPC_LAYOUT_FLAT ? 1 : L_,
                                                                 static_cast<int64_t>(R_) * T_, H_ / 128, caller);
    const bool scaled = fp8_ || pass_;
    if (scaled && !out_scales_.allocate(scales_.bytes, "cudaMalloc out_scales", error)) return false;
    // The second micro-batch's outputs (its inputs are the first's: the same routing and x).
    if (o_.micro_batches > 1 &&
        (!out_x2_.allocate(rows * out_row, "cudaMalloc out_x (micro-batch B)", error) ||
         !counts2_.allocate(static_cast<size_t>(L_) * 4, "cudaMalloc out_counts (micro-batch B)", error) ||
         !out2_.allocate(static_cast<size_t>(T_) * H_ * 2, "cudaMalloc combine output (micro-batch B)", error) ||
         (scaled && !out_scales2_.allocate(scales_.bytes, "cudaMalloc out_scales (micro-batch B)", error)))) {
      return false;
    }
    // Expert outputs of 1.0 make combine's result predictable (bench/output_check.hpp).
    if (pass_) {
      if (!fill_passthrough(error)) return false;
    } else {
      TRY_CUDA(fill_u16(x_.ptr, kBf16One, static_cast<size_t>(T_) * H_, s_->stream()), "filling x");
    }
    TRY_CUDA(fill_u16(y_.ptr, kBf16One, rows * H_, s_->stream()), "filling expert outputs");
    TRY_CUDA(cudaStreamSynchronize(s_->stream()), "filling buffers");
    return true;
  }

  GroupFacts facts() const override { return group_.facts(); }

  WireFormat wire() const override {
    WireFormat w = WireFormat::for_dtype(H_, fp8_, K_);
    if (pass_) w.dispatch_row_bytes = format_.row_bytes + format_.scale_bytes;  // committed bytes
    w.combine_per_entry = home_;
    w.line_tokens = line_tokens();
    // Line steps (kernels/wire/ll_message.hpp ll_dispatch_line_steps) move every dispatch but a
    // passthrough one as line records: every step of a line group, and with --step-bound any
    // step of at most that many tokens; never on one rank (kernels/ll/ll_dispatch_lines.cuh).
    const int lines = static_cast<int>(w.line_tokens);
    const uint64_t message_bytes = group_.facts().message_bytes;
    const bool line_group = kernels::ll_dispatch_line_group(lines, T_, message_bytes);
    w.dispatch_line_tokens =
        !pass_ && R_ > 1 && (line_group || o_.step_bound) ? kernels::ll_dispatch_line_steps(lines, message_bytes) : 0;
    return w;
  }

  // What core/plan.hpp's ll_line_tokens gives this group (mirrored here: the plan does not
  // report it; group creation has refused an EPCOMM_LL_LINE_TOKENS that is not a count).
  int64_t line_tokens() const {
    const bool one_node = o_.virtual_node_size == 0 || o_.virtual_node_size >= R_;
    if (!one_node || home_) return 0;
    const char* text = std::getenv("EPCOMM_LL_LINE_TOKENS");
    const int64_t wanted =
        text != nullptr && *text != '\0' ? std::strtoll(text, nullptr, 10) : int64_t{kernels::kLlLineTokens};
    return std::min<int64_t>(wanted, T_);
  }

  bool measure(const PointInput& in, MetricList& out, bool& checked, std::string& error) override {
    checked = false;
    const int B = in.tokens;
    const cudaStream_t st = s_->stream();
    if (!upload_routing(*s_, in, K_, idx_.ptr, w_.ptr, error)) return false;
    const EpcTensor idx = tensor(idx_.ptr, EPC_DTYPE_INT64, {B, K_});
    EpcRouting routing = EPC_ROUTING_INIT;
    routing.topk_idx = &idx;
    EpcHandle* handle = nullptr;
    const EpcHandleConfig config = handle_config();
    const EpcStatus created = epc_handle_create(group_.get(), &config, &routing, st, &handle);
    std::string create_error = created == EPC_OK ? "" : epc_error("epc_handle_create", created);
    const cudaError_t synced = cudaStreamSynchronize(st);
    if (created == EPC_OK && synced != cudaSuccess) create_error = cuda_error("uploading routing", synced);
    // No rank may start a collective step that a peer will never join.
    if (!s_->all_true(create_error.empty())) {
      epc_handle_destroy(handle);
      error = create_error.empty() ? "another rank could not create its handle" : create_error;
      return false;
    }
    bool ok = measure_with(handle, B, in, out, checked, error);
    if (ok && o_.micro_batches > 1) ok = measure_micro_batches(handle, idx, B, in, out, checked, error);
    const EpcStatus destroyed = epc_handle_destroy(handle);
    if (ok && destroyed != EPC_OK) {
      error = epc_error("epc_handle_destroy", destroyed);
      return false;
    }
    return ok;
  }

  void teardown() override {
    group_.destroy();
    for (DeviceBuffer* b : {&x_, &x_scales_, &global_scale_, &w_, &idx_, &out_x_, &out_scales_, &counts_, &rank_counts_,
                            &out_idx_, &out_w_, &y_, &out_, &out_x2_, &out_scales2_, &counts2_, &out2_}) {
      b->release();
    }
  }

 private:
  // --quant=passthrough: x and x_scales of every token hold the bytes that name it
  // (passthrough_row_byte, passthrough_scale_byte); the global scale is 1.0.
  bool fill_passthrough(std::string& error) {
    const int64_t row = format_.row_bytes, scales = format_.scale_bytes;
    std::vector<uint8_t> x(static_cast<size_t>(T_ * row)), s(static_cast<size_t>(T_ * scales));
    const int me = s_->rank();
    for (int t = 0; t < T_; ++t) {
      for (int64_t b = 0; b < row; ++b) x[static_cast<size_t>(t * row + b)] = passthrough_row_byte(me, t, b);
      for (int64_t b = 0; b < scales; ++b) s[static_cast<size_t>(t * scales + b)] = passthrough_scale_byte(me, t, b);
    }
    const float one = 1.0f;
    if (!x_scales_.allocate(s.size(), "cudaMalloc x_scales", error) ||
        !global_scale_.allocate(sizeof one, "cudaMalloc x_global_scale", error)) {
      return false;
    }
    TRY_CUDA(cudaMemcpy(x_.ptr, x.data(), x.size(), cudaMemcpyHostToDevice), "filling x");
    TRY_CUDA(cudaMemcpy(x_scales_.ptr, s.data(), s.size(), cudaMemcpyHostToDevice), "filling x_scales");
    TRY_CUDA(cudaMemcpy(global_scale_.ptr, &one, sizeof one, cudaMemcpyHostToDevice), "filling x_global_scale");
    return true;
  }

  // The tensors of micro-batch `batch` (0: A, the only one without --micro-batches=2).
  StepTensors tensors(int B, int batch = 0) const {
    const int64_t RT = static_cast<int64_t>(R_) * T_;
    const bool a = batch == 0;
    StepTensors t;
    const int64_t cols = pass_ ? format_.columns : H_;  // out_x's and (passthrough) x's last extent
    t.x = tensor(x_.ptr, pass_ ? format_.x_dtype : EPC_DTYPE_BF16, {B, cols});
    if (pass_) {
      t.x_scales = tensor(x_scales_.ptr, format_.scale_dtype, {B, format_.scale_count});
      t.global_scale = tensor(global_scale_.ptr, EPC_DTYPE_FP32, {1});
    }
    t.w = tensor(w_.ptr, EPC_DTYPE_FP32, {B, K_});
    const EpcDtype x_dtype = pass_ ? format_.x_dtype : fp8_ ? EPC_DTYPE_FP8_E4M3 : EPC_DTYPE_BF16;
    void* out_x = (a ? out_x_ : out_x2_).ptr;
    t.out_scales = scales_.tensor((a ? out_scales_ : out_scales2_).ptr);
    if (layout_ == EPC_LAYOUT_RANK_MAJOR) {
      t.out_x = tensor(out_x, x_dtype, {R_, T_, cols});
      t.y = tensor(y_.ptr, EPC_DTYPE_BF16, {R_, T_, H_});
      t.out_idx = tensor(out_idx_.ptr, EPC_DTYPE_INT32, {R_, T_, K_});
      t.out_w = tensor(out_w_.ptr, EPC_DTYPE_FP32, {R_, T_, K_});
    } else if (layout_ == EPC_LAYOUT_FLAT) {
      t.out_x = tensor(out_x, x_dtype, {RT, cols});
      t.y = tensor(y_.ptr, EPC_DTYPE_BF16, {RT, H_});
      t.out_idx = tensor(out_idx_.ptr, EPC_DTYPE_INT32, {RT, K_});
      t.out_w = tensor(out_w_.ptr, EPC_DTYPE_FP32, {RT, K_});
      t.out_scales.ndim = 2;  // [1, R x T, S] -> [R x T, S]
      for (int i = 0; i < 2; ++i) {
        t.out_scales.shape[i] = t.out_scales.shape[i + 1];
        t.out_scales.strides[i] = t.out_scales.strides[i + 1];
      }
      t.out_scales.shape[2] = t.out_scales.strides[2] = 0;
    } else {
      t.out_x = tensor(out_x, x_dtype, {L_, RT, cols});
      t.y = tensor(y_.ptr, EPC_DTYPE_BF16, {L_, RT, H_});
    }
    t.counts = tensor((a ? counts_ : counts2_).ptr, EPC_DTYPE_INT32, {L_});
    t.rank_counts = tensor(rank_counts_.ptr, EPC_DTYPE_INT32, {R_});
    t.num_recv = tensor(static_cast<int32_t*>(rank_counts_.ptr) + R_, EPC_DTYPE_INT32, {1});
    t.out = tensor((a ? out_ : out2_).ptr, EPC_DTYPE_BF16, {B, H_});
    return t;
  }

  // 1.3's epc_ll_dispatch / epc_ll_dispatch_fp8: the same tensors, the cast in the send
  // kernel with EPC_QUANT_FP8; or the caller's quantized rows (EPC_QUANT_PASSTHROUGH).
  EpcStatus call_dispatch(EpcHandle* h, const StepTensors& t, uint32_t flags, cudaStream_t st = nullptr) const {
    EpcDispatchArgs args = EPC_DISPATCH_ARGS_INIT;
    args.flags = flags;
    if (o_.step_bound) args.max_step_tokens = static_cast<uint32_t>(t.x.shape[0]);
    args.x = &t.x;
    args.topk_weights = &t.w;
    args.out_x = &t.out_x;
    if (layout_ != EPC_LAYOUT_RANK_MAJOR) args.out_expert_counts = &t.counts;
    if (layout_ != EPC_LAYOUT_EXPERT_PADDED) {
      args.out_topk_idx = &t.out_idx;
      args.out_topk_weights = &t.out_w;
    }
    if (layout_ == EPC_LAYOUT_RANK_MAJOR) args.out_rank_counts = &t.rank_counts;
    if (layout_ == EPC_LAYOUT_FLAT) args.out_num_recv = &t.num_recv;
    if (fp8_) {
      args.quant = EPC_QUANT_FP8;
      if (o_.pow2_scales) args.flags |= EPC_DISPATCH_POW2_SCALES;
      args.out_scales = &t.out_scales;
    } else if (pass_) {
      args.quant = EPC_QUANT_PASSTHROUGH;
      args.x_scales = &t.x_scales;
      if (format_.x_dtype == EPC_DTYPE_FP4_E2M1X2) args.x_global_scale = &t.global_scale;
      args.out_scales = &t.out_scales;
    }
    return epc_dispatch(h, &args, st != nullptr ? st : s_->stream());
  }

  EpcStatus call_combine(EpcHandle* h, const StepTensors& t, uint32_t flags, cudaStream_t st = nullptr) const {
    EpcCombineArgs args = EPC_COMBINE_ARGS_INIT;
    args.flags = flags;
    args.x = &t.y;
    args.out = &t.out;
    if (home_) {
      args.weighting = EPC_WEIGHTING_HOME;
      args.home_topk_weights = &t.w;
    }
    return epc_combine(h, &args, st != nullptr ? st : s_->stream());
  }

  // One dispatch (send + complete with --send-only), recording marks when given.
  bool dispatch(EpcHandle* h, const StepTensors& t, StepMarks* m, int iter, std::string& error) {
    const cudaStream_t st = s_->stream();
    if (m) m->record(iter, kStart, st);
    if (o_.send_only) {
      TRY_EPC(call_dispatch(h, t, EPC_STEP_SEND_ONLY), "epc_dispatch (send-only)");
      if (m) m->record(iter, kDispatchSent, st);
      TRY_EPC(epc_complete(h, 0, st), "epc_complete after dispatch");
    } else {
      TRY_EPC(call_dispatch(h, t, 0), "epc_dispatch");
    }
    if (m) m->record(iter, kDispatchDone, st);
    return true;
  }

  bool combine(EpcHandle* h, const StepTensors& t, StepMarks* m, int iter, std::string& error) {
    const cudaStream_t st = s_->stream();
    if (o_.send_only) {
      TRY_EPC(call_combine(h, t, EPC_STEP_SEND_ONLY), "epc_combine (send-only)");
      if (m) m->record(iter, kCombineSent, st);
      TRY_EPC(epc_complete(h, 0, st), "epc_complete after combine");
    } else {
      TRY_EPC(call_combine(h, t, 0), "epc_combine");
    }
    if (m) m->record(iter, kCombineDone, st);
    return true;
  }

  bool measure_with(EpcHandle* h, int B, const PointInput& in, MetricList& out, bool& checked, std::string& error) {
    const StepTensors t = tensors(B);
    StepCalls step{[&](StepMarks* m, int iter, std::string& e) { return dispatch(h, t, m, iter, e); },
                   [&](StepMarks* m, int iter, std::string& e) { return combine(h, t, m, iter, e); }};
#ifdef EPC_PHASE_TRACE
    step.after_kernel_timing = [this](int steps, MetricList& o, std::string&) { return read_phases(steps, o); };
#endif
    return time_point(*s_, o_, in, step, [&](std::string& e) { return check_outputs(B, in, e); }, out, checked, error);
  }

  // Collective. The layer timing of two micro-batches: `a` and a second handle on the same
  // routing (`idx`), each with its own outputs, both checked after the timed layers.
  bool measure_micro_batches(EpcHandle* a, const EpcTensor& idx, int B, const PointInput& in, MetricList& out,
                             bool& checked, std::string& error) {
    const cudaStream_t st = s_->stream();
    EpcRouting routing = EPC_ROUTING_INIT;
    routing.topk_idx = &idx;
    EpcHandle* b = nullptr;
    const EpcHandleConfig config = handle_config();
    const EpcStatus created = epc_handle_create(group_.get(), &config, &routing, st, &b);
    if (!s_->all_true(created == EPC_OK)) {
      epc_handle_destroy(b);
      error = created == EPC_OK ? "another rank could not create its second handle"
                                : epc_error("epc_handle_create (micro-batch B)", created);
      return false;
    }
    EpcHandle* handles[2] = {a, b};
    const StepTensors t[2] = {tensors(B, 0), tensors(B, 1)};
    MicroBatchCalls calls;
    calls.dispatch = [&](int m, uint32_t flags, cudaStream_t s, std::string& e) {
      const EpcStatus status = call_dispatch(handles[m], t[m], flags, s);
      if (status != EPC_OK) e = epc_error("epc_dispatch (micro-batch)", status);
      return status == EPC_OK;
    };
    calls.combine = [&](int m, uint32_t flags, cudaStream_t s, std::string& e) {
      const EpcStatus status = call_combine(handles[m], t[m], flags, s);
      if (status != EPC_OK) e = epc_error("epc_combine (micro-batch)", status);
      return status == EPC_OK;
    };
    calls.complete = [&](int m, cudaStream_t s, std::string& e) {
      const EpcStatus status = epc_complete(handles[m], 0, s);
      if (status != EPC_OK) e = epc_error("epc_complete (micro-batch)", status);
      return status == EPC_OK;
    };
    bool ok = time_micro_batches(st, o_, in.warmup, in.iters, calls, out, error);
    // Both micro-batches' last layer (overlapped) must hold the expected results.
    if (ok) ok = check_outputs(B, in, error, 0) && check_outputs(B, in, error, 1);
    checked = checked && ok;
    const EpcStatus destroyed = epc_handle_destroy(b);
    if (ok && destroyed != EPC_OK) {
      error = epc_error("epc_handle_destroy (micro-batch B)", destroyed);
      return false;
    }
    return ok;
  }

#ifdef EPC_PHASE_TRACE
  // Collective. The phases of the last `steps` steps, kept when every rank could read them.
  bool read_phases(int steps, MetricList& out) {
    auto trace = std::make_unique<kernels::LlPhaseTrace>();
    MetricList figures;
    std::string problem;
    const EpcStatus status = epc_debug_ll_phase_trace(group_.get(), trace.get(), sizeof *trace);
    if (status != EPC_OK) {
      problem = epc_error("epc_debug_ll_phase_trace", status);
    } else {
      phase_metrics(*trace, steps, figures, problem);
    }
    keep_if_every_rank_has(*s_, "LL phase trace", figures, problem, out);
    return true;
  }
#endif

  // The outputs of micro-batch `batch` (0: A).
  bool check_outputs(int B, const PointInput& in, std::string& error, int batch = 0) {
    std::vector<int32_t> counts(static_cast<size_t>(L_));
    std::vector<uint16_t> combined(static_cast<size_t>(B) * H_);
    TRY_CUDA(cudaDeviceSynchronize(), "waiting for the steps");
    TRY_CUDA(
        cudaMemcpy(counts.data(), (batch == 0 ? counts_ : counts2_).ptr, counts.size() * 4, cudaMemcpyDeviceToHost),
        "reading out_counts");
    TRY_CUDA(cudaMemcpy(combined.data(), (batch == 0 ? out_ : out2_).ptr, combined.size() * 2, cudaMemcpyDeviceToHost),
             "reading the combine output");
    // Expert outputs of 1.0: weighted partials per rank (EXPERT_PADDED; with weights at
    // combine one weighted sum over the entries), or the number of ranks that received the
    // token (the token layouts, rows summed as given).
    const std::vector<float> expected = layout_ == EPC_LAYOUT_EXPERT_PADDED
                                            ? expected_combine(*in.routing, B, K_, L_, R_, /*per_rank_partials=*/!home_)
                                            : expected_ht_combine(*in.routing, B, K_, L_, R_);
    std::string why;
    // RANK_MAJOR reports no per-expert counts.
    if ((layout_ != EPC_LAYOUT_RANK_MAJOR && !check_counts(counts, in.traffic->expected_counts, why)) ||
        !check_combined(combined, B, H_, expected, why) || (pass_ && !check_passthrough(B, in, batch, why))) {
      error = "wrong results, so no times are reported: " + why;
      return false;
    }
    return true;
  }

  // --quant=passthrough: every row the reference model gives this rank holds its token's bytes.
  // Only rows that receive a token are read (runs of consecutive rows, one copy each).
  bool check_passthrough(int B, const PointInput& in, int batch, std::string& why) {
    const LlRows kind = layout_ == EPC_LAYOUT_RANK_MAJOR ? LlRows::kRankMajor
                        : layout_ == EPC_LAYOUT_FLAT     ? LlRows::kFlat
                                                         : LlRows::kExpertPadded;
    std::vector<RowSource> sources;
    if (!ll_row_sources(*in.all_routing, s_->rank(), B, K_, o_.experts, T_, kind, sources, why)) return false;
    // The rows that receive a token, in out_x order, copied run by run (no [L, R*T] host copy).
    std::vector<size_t> at;
    std::vector<RowSource> kept;
    for (size_t i = 0; i < sources.size(); ++i) {
      if (sources[i].rank < 0) continue;
      at.push_back(i);
      kept.push_back(sources[i]);
    }
    const size_t row = static_cast<size_t>(format_.row_bytes), scale_bytes = static_cast<size_t>(format_.scale_bytes);
    const char* out_x = static_cast<const char*>((batch == 0 ? out_x_ : out_x2_).ptr);
    std::vector<uint8_t> x(kept.size() * row), strided(scales_.bytes), scales(kept.size() * scale_bytes);
    for (size_t k = 0; k < at.size();) {
      size_t end = k + 1;
      while (end < at.size() && at[end] == at[end - 1] + 1) ++end;
      if (cudaMemcpy(&x[k * row], out_x + at[k] * row, (end - k) * row, cudaMemcpyDeviceToHost) != cudaSuccess) {
        why = "reading out_x failed";
        return false;
      }
      k = end;
    }
    if (cudaMemcpy(strided.data(), (batch == 0 ? out_scales_ : out_scales2_).ptr, strided.size(),
                   cudaMemcpyDeviceToHost) != cudaSuccess) {
      why = "reading out_scales failed";
      return false;
    }
    // Row i of out_x is row i % zone of zone i / zone in out_scales (FLAT: one zone).
    const int64_t zone = scales_.shape[1], element = format_.scale_bytes / format_.scale_count;
    for (size_t k = 0; k < at.size(); ++k) {
      const int64_t r = static_cast<int64_t>(at[k]);
      for (int64_t w = 0; w < format_.scale_count; ++w) {
        const int64_t e = (r / zone) * scales_.strides[0] + (r % zone) * scales_.strides[1] + w * scales_.strides[2];
        std::memcpy(&scales[k * scale_bytes + static_cast<size_t>(w * element)],
                    &strided[static_cast<size_t>(e * element)], static_cast<size_t>(element));
      }
    }
    return check_passthrough_rows(kept, x, format_.row_bytes, scales, format_.scale_bytes, why);
  }

  EpcHandleConfig handle_config() const {
    EpcHandleConfig config = EPC_HANDLE_CONFIG_INIT;
    config.layout = layout_;
    return config;
  }

  RankSession* s_ = nullptr;
  Options o_;
  bool fp8_ = false;
  bool pass_ = false;     // --quant=passthrough
  TokenFormat format_{};  // x and its scales (token_format)
  bool home_ = false;     // --weights-at=combine: EPC_WEIGHTING_HOME
  EpcLayout layout_ = EPC_LAYOUT_EXPERT_PADDED;
  LlScaleLayout scales_;  // out_scales' dtype and strides (--scales)
  int R_ = 0, T_ = 0, H_ = 0, K_ = 0, L_ = 0;
  OurGroup group_;
  DeviceBuffer x_, x_scales_, global_scale_, w_, idx_, out_x_, out_scales_, counts_, rank_counts_, out_idx_, out_w_, y_,
      out_;
  DeviceBuffer out_x2_, out_scales2_, counts2_, out2_;  // micro-batch B's (--micro-batches=2)
};

}  // namespace

std::unique_ptr<Mode> make_ll_mode() { return std::make_unique<LlMode>(); }

}  // namespace epc::bench
