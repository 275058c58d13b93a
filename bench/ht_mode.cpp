// SPDX-License-Identifier: Apache-2.0
// Our high-throughput dispatch and combine (epc_dispatch / epc_combine on an HT group). Per point:
//  layout: handles for the point's routing are created with epc_handle_create (collective;
//          --ht-sizing=exact synchronises once inside), min(iters, 20) times, each creation
//          timed on the host until the stream is done (ours.api.layout) and with CUDA events
//          around the call (ours.kernel.layout); the last handle is kept. With capacity
//          sizing the graph-safe epc_handle_update is also timed back to back
//          (ours.kernel.layout_update, and its GPU time ours.cupti.layout_update), after the
//          steps below.
//  step:   epc_dispatch then epc_combine on that handle, timed as bench/mode_support.hpp
//          says (kernel, api and, with --graph, graph replay of dispatch + combine only: the
//          handle is created before the capture, so graphs work in either sizing).
// The payload is bf16 1.0, or fp8 e4m3 1.0 with scales of 1.0 [B, H/128] filled once (the
// caller's quantization is not timed). Combine returns rows of bf16 1.0, so a token's result
// is the number of ranks that received it (expert-packed: of entries, times 1/topk with
// --weights-at=dispatch or combine). After the kernel-timed steps the outputs are
// checked: N (out_num_recv, and the handle's row count with exact sizing), the received
// (token, entry) pairs per local expert (out_expert_counts), and combine's result. With
// --capacity-factor below 1 the group's receive window holds ceil(F * R * T) rows: under
// --overflow=drop the expected outputs are the reference model's DROP result
// (bench/ht_capacity_check.hpp); under --overflow=fail a point whose routing overflows is not
// timed: the bench checks the overflow the handle reports and that the next call refuses.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "bench/cupti_timing.hpp"
#include "bench/device_fill.hpp"
#include "bench/ht_capacity_check.hpp"
#include "bench/mode.hpp"
#include "bench/mode_support.hpp"
#include "bench/output_check.hpp"
#include "bench/try_call.hpp"
#include "epcomm/epcomm.h"

namespace epc::bench {
namespace {

constexpr int kMaxLayoutSamples = 20;

struct HtTensors {
  EpcTensor x, x_scales, w, out_x, out_scales, out_idx, out_w, counts, num_recv, y, out;
};

class HtMode final : public Mode {
 public:
  ~HtMode() override { teardown(); }

  bool setup(RankSession& session, const Options& options, std::string& error) override {
    s_ = &session;
    o_ = options;
    fp8_ = o_.dtype == "fp8";
    format_ = token_format(o_);
    scaled_ = format_.scale_dtype != EPC_DTYPE_INVALID;
    capacity_ = o_.ht_sizing == "capacity";
    packed_ = o_.layout == "expert-packed";
    weighting_ = o_.weights_at == "dispatch"  ? EPC_WEIGHTING_SENDER
                 : o_.weights_at == "combine" ? EPC_WEIGHTING_HOME
                                              : EPC_WEIGHTING_NONE;
    align_ = std::max(1, o_.alignment);
    R_ = session.nranks();
    T_ = o_.group_max_tokens();
    H_ = o_.hidden;
    K_ = o_.topk;
    window_ = ht_recv_capacity(o_, R_);
    compact_ = window_ < static_cast<int64_t>(R_) * T_;
    EpcGroupConfig config = group_config(o_, EPC_MODE_HIGH_THROUGHPUT);
    if (compact_) config.recv_capacity = static_cast<uint64_t>(window_);  // else 0: the default R * T
    config.overflow = o_.overflow == "drop" ? EPC_OVERFLOW_DROP : EPC_OVERFLOW_FAIL;
    if (!group_.create(session, config, error)) return false;
    L_ = static_cast<int>(group_.info().local_experts);

    // Every [rows, ...] tensor is sized for the most a handle can report (capacity sizing:
    // ranks x max tokens), so one allocation serves every point and either sizing.
    const size_t T = static_cast<size_t>(T_), H = static_cast<size_t>(H_), K = static_cast<size_t>(K_);
    const size_t rows = static_cast<size_t>(max_rows());
    const size_t row_bytes = static_cast<size_t>(format_.row_bytes);
    const size_t scale_bytes = static_cast<size_t>(format_.scale_bytes);
    if (!x_.allocate(T * row_bytes, "cudaMalloc x", error) ||
        !w_.allocate(T * K * 4, "cudaMalloc topk_weights", error) ||
        !idx_.allocate(T * K * 8, "cudaMalloc topk_idx", error) ||
        !out_x_.allocate(rows * row_bytes, "cudaMalloc out_x", error) ||
        !out_idx_.allocate(rows * K * 4, "cudaMalloc out_topk_idx", error) ||
        !out_w_.allocate(rows * K * 4, "cudaMalloc out_topk_weights", error) ||
        !counts_.allocate(static_cast<size_t>(L_) * 4, "cudaMalloc out_expert_counts", error) ||
        !num_recv_.allocate(4, "cudaMalloc out_num_recv", error) ||
        !y_.allocate(rows * H * 2, "cudaMalloc combine input", error) ||
        !out_.allocate(T * H * 2, "cudaMalloc combine output", error)) {
      return false;
    }
    const cudaStream_t st = s_->stream();
    if (scaled_) {
      if (!x_scales_.allocate(T * scale_bytes, "cudaMalloc x_scales", error) ||
          !out_scales_.allocate(rows * scale_bytes, "cudaMalloc out_scales", error)) {
        return false;
      }
      // 1.0 in e4m3, two 1.0 in e2m1; scales of 1.0 (fp32), or 1.0 as e8m0 (127) bytes.
      const uint8_t one = format_.x_dtype == EPC_DTYPE_FP4_E2M1X2 ? 0x22 : kFp8E4m3One;
      TRY_CUDA(cudaMemsetAsync(x_.ptr, one, T * row_bytes, st), "filling x");
      if (format_.scale_dtype == EPC_DTYPE_FP32) {
        TRY_CUDA(fill_u32(x_scales_.ptr, kFp32One, T * scale_bytes / 4, st), "filling x_scales");
      } else {
        TRY_CUDA(cudaMemsetAsync(x_scales_.ptr, 127, T * scale_bytes, st), "filling x_scales");
      }
    } else {
      TRY_CUDA(fill_u16(x_.ptr, kBf16One, T * H, st), "filling x");
    }
    TRY_CUDA(fill_u16(y_.ptr, kBf16One, rows * H, st), "filling the combine input");
    TRY_CUDA(cudaStreamSynchronize(st), "filling buffers");
    return true;
  }

  GroupFacts facts() const override { return group_.facts(); }

  WireFormat wire() const override {
    WireFormat w = WireFormat::for_ht(H_, fp8_, K_);
    w.combine_per_entry = weighting_ == EPC_WEIGHTING_HOME;
    return w;
  }

  bool measure(const PointInput& in, MetricList& out, bool& checked, std::string& error) override {
    checked = false;
    const int B = in.tokens;
    if (!upload_routing(*s_, in, K_, idx_.ptr, w_.ptr, error)) return false;
    EpcHandle* handle = nullptr;
    int64_t rows = 0;
    expected_.reset();
    if (compact_) {
      HtCapacityExpectation e;
      if (!expect_ht_capacity(*in.all_routing, s_->rank(), B, K_, o_.experts, window_, e, error)) return false;
      expected_ = std::move(e);
    }
    // Under FAIL an overflowing routing gets one handle: no step can run on it.
    const bool refused = expected_ && expected_->overflow_rank >= 0 && o_.overflow == "fail";
    if (!create_handles(B, refused ? 1 : std::max(1, std::min(in.iters, kMaxLayoutSamples)), handle, rows, out,
                        error)) {
      return false;
    }
    const bool ok = check_rows(rows, in, error) && (refused ? check_refusal(handle, B, rows, error)
                                                            : measure_with(handle, B, rows, in, out, checked, error));
    const EpcStatus destroyed = epc_handle_destroy(handle);
    if (ok && destroyed != EPC_OK) {
      error = epc_error("epc_handle_destroy", destroyed);
      return false;
    }
    return ok;
  }

  void teardown() override {
    group_.destroy();
    for (DeviceBuffer* b :
         {&x_, &x_scales_, &w_, &idx_, &out_x_, &out_scales_, &out_idx_, &out_w_, &counts_, &num_recv_, &y_, &out_}) {
      b->release();
    }
  }

 private:
  EpcSizing sizing() const { return capacity_ ? EPC_SIZING_CAPACITY : EPC_SIZING_EXACT; }

  // The most rows a handle reports: the window, R * T or --capacity-factor's (flat), or every
  // entry of R * T tokens in zones aligned to align_ (expert-packed; EpcHandleConfig.capacity's
  // default).
  int64_t max_rows() const {
    const int64_t tokens = static_cast<int64_t>(R_) * T_;
    if (!packed_) return window_;
    const int64_t entries = tokens * K_;
    return (entries + std::min<int64_t>(L_, entries) * (align_ - 1)) / align_ * align_;
  }

  // Rows the routing gives an EXACT handle: received tokens up to the window, or aligned zones
  // of entries.
  int64_t exact_rows(const PointInput& in) const {
    if (!packed_) return std::min(in.traffic->received_tokens, window_);
    int64_t rows = 0;
    for (int32_t c : in.traffic->expected_counts) rows += (c + align_ - 1) / align_ * align_;
    return rows;
  }

  int64_t received_entries(const PointInput& in) const {
    int64_t entries = 0;
    for (int32_t c : in.traffic->expected_counts) entries += c;
    return entries;
  }

  // epc_handle_create with the point's routing (collective on HT groups; EXACT sizing waits
  // for the count exchange), then its rows from epc_handle_query: 1.3's epc_ht_handle_create.
  EpcStatus create_handle(const EpcTensor& idx, EpcHandle*& handle, int64_t& rows) const {
    EpcHandleConfig config = EPC_HANDLE_CONFIG_INIT;
    config.sizing = sizing();
    if (packed_) {
      config.layout = EPC_LAYOUT_EXPERT_PACKED;
      config.expert_alignment = static_cast<uint32_t>(o_.alignment);
    }
    EpcRouting routing = EPC_ROUTING_INIT;
    routing.topk_idx = &idx;
    EpcStatus status = epc_handle_create(group_.get(), &config, &routing, s_->stream(), &handle);
    if (status != EPC_OK) return status;
    EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
    status = epc_handle_query(handle, &info);
    if (status == EPC_OK) rows = info.rows;
    return status;
  }

  // Creates `samples` handles for the routing one after another, timing each, and keeps the
  // last in `handle`. Every rank agrees after each creation (a host-side collective), so no
  // rank enters a collective its peers will not join, and the ranks start each creation
  // together: the host time is the creation's, not a wait for a late peer.
  bool create_handles(int B, int samples, EpcHandle*& handle, int64_t& rows, MetricList& out, std::string& error) {
    const cudaStream_t st = s_->stream();
    const EpcTensor idx = tensor(idx_.ptr, EPC_DTYPE_INT64, {B, K_});
    EventMarks marks(samples, 2);
    std::vector<double> api;
    for (int i = 0; i < samples; ++i) {
      EpcHandle* h = nullptr;
      int64_t r = 0;
      marks.record(i, 0, st);
      const Clock::time_point t0 = Clock::now();
      const EpcStatus created = create_handle(idx, h, r);
      marks.record(i, 1, st);
      const cudaError_t synced = cudaStreamSynchronize(st);
      const Clock::time_point t1 = Clock::now();
      std::string mine;
      if (created != EPC_OK) {
        mine = epc_error("epc_handle_create", created);
      } else if (synced != cudaSuccess) {
        mine = cuda_error("creating a high-throughput handle", synced);
      }
      if (!s_->all_true(mine.empty())) {
        epc_handle_destroy(h);
        epc_handle_destroy(handle);
        handle = nullptr;
        error = mine.empty() ? "another rank could not create its handle" : mine;
        return false;
      }
      api.push_back(us_between(t0, t1));
      epc_handle_destroy(handle);  // the previous sample's; NULL is a no-op
      handle = h;
      rows = r;
    }
    std::vector<double> kernel;
    if (!marks.ok() || !marks.elapsed_us(0, 1, kernel)) {
      error = "reading the CUDA events of the handle creations";
      return false;
    }
    out.emplace_back("ours.kernel.layout", summarize(kernel));
    out.emplace_back("ours.api.layout", summarize(api));
    return true;
  }

  // The handle's row count: N with exact sizing, ranks x max tokens with capacity sizing.
  bool check_rows(int64_t rows, const PointInput& in, std::string& error) {
    const int64_t want = capacity_ ? max_rows() : exact_rows(in);
    const bool right = rows == want;
    if (!right) {
      error = "epc_handle_query reported " + std::to_string(rows) + " rows; the routing (" + o_.ht_sizing +
              " sizing) gives " + std::to_string(want);
    }
    if (!s_->all_true(right)) {
      if (right) error = "another rank's handle has a wrong row count";
      return false;
    }
    return true;
  }

  HtTensors tensors(int B, int64_t rows) const {
    const EpcDtype xt = format_.x_dtype;
    const int64_t cols = format_.columns, S = format_.scale_count;
    HtTensors t;
    t.x = tensor(x_.ptr, xt, {B, cols});
    t.x_scales = tensor(x_scales_.ptr, format_.scale_dtype, {B, S});
    t.w = tensor(w_.ptr, EPC_DTYPE_FP32, {B, K_});
    t.out_x = tensor(out_x_.ptr, xt, {rows, cols});
    t.out_scales = tensor(out_scales_.ptr, format_.scale_dtype, {rows, S});
    t.out_idx = tensor(out_idx_.ptr, EPC_DTYPE_INT32, {rows, K_});
    t.out_w = packed_ ? tensor(out_w_.ptr, EPC_DTYPE_FP32, {rows}) : tensor(out_w_.ptr, EPC_DTYPE_FP32, {rows, K_});
    t.counts = tensor(counts_.ptr, EPC_DTYPE_INT32, {L_});
    t.num_recv = tensor(num_recv_.ptr, EPC_DTYPE_INT32, {1});
    t.y = tensor(y_.ptr, EPC_DTYPE_BF16, {rows, H_});
    t.out = tensor(out_.ptr, EPC_DTYPE_BF16, {B, H_});
    return t;
  }

  bool dispatch(EpcHandle* h, const HtTensors& t, StepMarks* m, int iter, std::string& error) {
    const cudaStream_t st = s_->stream();
    if (m) m->record(iter, kStart, st);
    // Every optional output, as 1.3's epc_ht_dispatch call did; PASSTHROUGH for fp8 x.
    EpcDispatchArgs args = EPC_DISPATCH_ARGS_INIT;
    args.x = &t.x;
    args.topk_weights = &t.w;
    args.out_x = &t.out_x;
    args.out_topk_idx = packed_ ? nullptr : &t.out_idx;  // expert-packed has no such output
    args.out_topk_weights = &t.out_w;
    args.out_expert_counts = &t.counts;
    args.out_num_recv = &t.num_recv;
    if (scaled_) {
      args.quant = EPC_QUANT_PASSTHROUGH;
      args.x_scales = &t.x_scales;
      args.out_scales = &t.out_scales;
    }
    if (o_.send_only) {
      args.flags = EPC_STEP_SEND_ONLY;
      TRY_EPC(epc_dispatch(h, &args, st), "epc_dispatch (send-only)");
      if (m) m->record(iter, kDispatchSent, st);
      TRY_EPC(epc_complete(h, 0, st), "epc_complete after dispatch");
    } else {
      TRY_EPC(epc_dispatch(h, &args, st), "epc_dispatch");
    }
    if (m) m->record(iter, kDispatchDone, st);
    return true;
  }

  bool combine(EpcHandle* h, const HtTensors& t, StepMarks* m, int iter, std::string& error) {
    const cudaStream_t st = s_->stream();
    EpcCombineArgs args = EPC_COMBINE_ARGS_INIT;
    args.x = &t.y;
    args.out = &t.out;
    // Expert-packed: a token's rows summed as given (1.0 each), as flat's are, or weighted
    // by 1/topk on the expert's rank (dispatch's weights) or on the token's (given here).
    if (packed_) args.weighting = weighting_;
    if (weighting_ == EPC_WEIGHTING_HOME) args.home_topk_weights = &t.w;
    if (o_.send_only) {
      args.flags = EPC_STEP_SEND_ONLY;
      TRY_EPC(epc_combine(h, &args, st), "epc_combine (send-only)");
      if (m) m->record(iter, kCombineSent, st);
      TRY_EPC(epc_complete(h, 0, st), "epc_complete after combine");
    } else {
      TRY_EPC(epc_combine(h, &args, st), "epc_combine");
    }
    if (m) m->record(iter, kCombineDone, st);
    return true;
  }

  bool measure_with(EpcHandle* h, int B, int64_t rows, const PointInput& in, MetricList& out, bool& checked,
                    std::string& error) {
    const HtTensors t = tensors(B, rows);
    const StepCalls step{[&](StepMarks* m, int iter, std::string& e) { return dispatch(h, t, m, iter, e); },
                         [&](StepMarks* m, int iter, std::string& e) { return combine(h, t, m, iter, e); }};
    if (!time_point(*s_, o_, in, step, [&](std::string& e) { return check_outputs(B, in, e); }, out, checked, error)) {
      return false;
    }
    return !capacity_ || time_layout_update(h, B, in, out, error);
  }

  bool check_outputs(int B, const PointInput& in, std::string& error) {
    int32_t num_recv = -1;
    std::vector<int32_t> counts(static_cast<size_t>(L_));
    std::vector<uint16_t> combined(static_cast<size_t>(B) * H_);
    TRY_CUDA(cudaMemcpy(&num_recv, num_recv_.ptr, 4, cudaMemcpyDeviceToHost), "reading out_num_recv");
    TRY_CUDA(cudaMemcpy(counts.data(), counts_.ptr, counts.size() * 4, cudaMemcpyDeviceToHost),
             "reading out_expert_counts");
    TRY_CUDA(cudaMemcpy(combined.data(), out_.ptr, combined.size() * 2, cudaMemcpyDeviceToHost),
             "reading the combine output");
    std::string why;
    const int64_t want_recv = packed_ ? received_entries(in) : in.traffic->received_tokens;
    // A smaller window: what the reference model keeps (DROP; under FAIL no point that
    // overflows gets here). out_num_recv counts the rows that arrived, dropped ones included.
    const std::vector<int32_t>& want_counts = expected_ ? expected_->expert_counts : in.traffic->expected_counts;
    if (num_recv != want_recv) {
      why = "dispatch received " + std::to_string(num_recv) + " rows (out_num_recv); the routing sends " +
            std::to_string(want_recv);
    } else if (check_counts(counts, want_counts, why)) {
      check_combined(combined, B, H_,
                     expected_ ? expected_->combined
                     : packed_ ? expected_packed_combine(*in.routing, B)
                               : expected_ht_combine(*in.routing, B, K_, L_, R_),
                     why);
    }
    if (!why.empty()) {
      error = "wrong results, so no times are reported: " + why;
      return false;
    }
    return true;
  }

  // --overflow=fail on a routing that overflows some rank's window: one dispatch, which the
  // device turns into nothing on every rank; then the handle must report the overflow the
  // reference model gives this rank, and the next call (combine) must return
  // EPC_ERR_CAPACITY. Either way the point has no times: the error says what was checked.
  bool check_refusal(EpcHandle* h, int B, int64_t rows, std::string& error) {
    const HtTensors t = tensors(B, rows);
    if (!dispatch(h, t, nullptr, 0, error)) return false;
    TRY_CUDA(cudaStreamSynchronize(s_->stream()), "running the overflowing dispatch");
    EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
    TRY_EPC(epc_handle_query(h, &info), "epc_handle_query");
    EpcCombineArgs args = EPC_COMBINE_ARGS_INIT;
    args.x = &t.y;
    args.out = &t.out;
    const EpcStatus combined = epc_combine(h, &args, s_->stream());
    const HtCapacityExpectation& e = *expected_;
    std::string why;
    if (info.overflow_status != EPC_ERR_CAPACITY || info.overflow_rank != e.overflow_rank ||
        info.overflow_rows != e.overflow_rows) {
      why = "epc_handle_query reported overflow status " + std::to_string(info.overflow_status) + ", rank " +
            std::to_string(info.overflow_rank) + ", " + std::to_string(info.overflow_rows) +
            " rows; the reference model gives EPC_ERR_CAPACITY, rank " + std::to_string(e.overflow_rank) + ", " +
            std::to_string(e.overflow_rows) + " rows";
    } else if (combined != EPC_ERR_CAPACITY) {
      why =
          "epc_combine after the overflowing dispatch returned " + std::to_string(combined) + ", not EPC_ERR_CAPACITY";
    }
    if (!s_->all_true(why.empty())) {
      error = why.empty() ? "another rank's overflow report is wrong" : "wrong overflow report: " + why;
      return false;
    }
    error = "--overflow=fail with a window of " + std::to_string(window_) +
            " rows (--capacity-factor=" + factor_text() + " of " + std::to_string(static_cast<int64_t>(R_) * T_) +
            "): rank " + std::to_string(e.overflow_rank) + " receives " + std::to_string(e.overflow_rows) +
            " rows more than it holds, so every step overflows and does nothing (EPC_OVERFLOW_FAIL); the handle "
            "reported that overflow as the reference model gives it and epc_combine returned EPC_ERR_CAPACITY; "
            "no times (use --overflow=drop, or a larger --capacity-factor)";
    return false;
  }

  std::string factor_text() const {
    char text[32];
    std::snprintf(text, sizeof text, "%g", o_.capacity_factor);
    return text;
  }

  // Expert-packed combine of rows of 1.0: each token's unmasked entries, each weighted 1/topk
  // where weights apply (upload_routing's weights; check_combined allows for the rounding).
  std::vector<float> expected_packed_combine(const Routing& routing, int B) const {
    const float weight = weighting_ == EPC_WEIGHTING_NONE ? 1.0f : 1.0f / static_cast<float>(K_);
    std::vector<float> sums(static_cast<size_t>(B), 0.0f);
    for (int t = 0; t < B; ++t) {
      for (int k = 0; k < K_; ++k) sums[t] += routing[static_cast<size_t>(t) * K_ + k] >= 0 ? weight : 0.0f;
    }
    return sums;
  }

  // Capacity sizing: the per-step layout through epc_handle_update (collective, no host
  // synchronisation), with the same routing, back to back; with a tracer also its GPU time.
  bool time_layout_update(EpcHandle* h, int B, const PointInput& in, MetricList& out, std::string& error) {
    const cudaStream_t st = s_->stream();
    const EpcTensor idx = tensor(idx_.ptr, EPC_DTYPE_INT64, {B, K_});
    EpcRouting routing = EPC_ROUTING_INIT;
    routing.topk_idx = &idx;
    const StepHalf update = [&](StepMarks* m, int iter, std::string& e) {
      if (m) m->record(iter, 0, st);
      const EpcStatus status = epc_handle_update(h, &routing, st);
      if (status != EPC_OK) {
        e = epc_error("epc_handle_update", status);
        return false;
      }
      if (m) m->record(iter, 1, st);
      return true;
    };
    for (int i = 0; i < in.warmup; ++i) {
      if (!update(nullptr, 0, error)) return false;
    }
    EventMarks marks(in.iters, 2);
    for (int i = 0; i < in.iters; ++i) {
      if (!update(&marks, i, error)) return false;
    }
    TRY_CUDA(cudaStreamSynchronize(st), "running epc_handle_update");
    std::vector<double> us;
    if (!marks.ok() || !marks.elapsed_us(0, 1, us)) {
      error = "reading the CUDA events of epc_handle_update";
      return false;
    }
    out.emplace_back("ours.kernel.layout_update", summarize(us));
    return in.tracer == nullptr ||
           time_cupti_calls(*s_, *in.tracer, "ours.cupti.layout_update", in.iters, update, out, error);
  }

  RankSession* s_ = nullptr;
  Options o_;
  bool fp8_ = false;
  TokenFormat format_{};
  bool scaled_ = false;  // fp8, or --quant=passthrough: scales travel
  bool capacity_ = false;
  bool packed_ = false;
  EpcWeighting weighting_ = EPC_WEIGHTING_NONE;  // expert-packed combine (--weights-at)
  int align_ = 1;
  int64_t window_ = 0;                             // the group's receive window in rows (ht_recv_capacity)
  bool compact_ = false;                           // window_ < R * T: rows can overflow
  std::optional<HtCapacityExpectation> expected_;  // the point's, with a compact window
  int R_ = 0, T_ = 0, H_ = 0, K_ = 0, L_ = 0;
  OurGroup group_;
  DeviceBuffer x_, x_scales_, w_, idx_, out_x_, out_scales_, out_idx_, out_w_, counts_, num_recv_, y_, out_;
};

}  // namespace

std::unique_ptr<Mode> make_ht_mode() { return std::make_unique<HtMode>(); }

}  // namespace epc::bench
