// SPDX-License-Identifier: Apache-2.0
#include "bench/nccl_baseline.hpp"

#include <nccl.h>

#include <algorithm>

#include "bench/baseline_kernels.hpp"
#include "bench/device_fill.hpp"
#include "bench/mode_support.hpp"
#include "bench/output_check.hpp"
#include "bench/try_call.hpp"

namespace epc::bench {

NcclBaseline::~NcclBaseline() { teardown(); }

void NcclBaseline::teardown() {
  for (void* p : buffers_) cudaFree(p);
  buffers_.clear();
  lanes_.clear();
  if (host_counts_ != nullptr) cudaFreeHost(host_counts_);
  host_counts_ = nullptr;
}

bool NcclBaseline::allocate(void*& p, size_t bytes, const char* what, std::string& error) {
  const cudaError_t c = cudaMalloc(&p, bytes == 0 ? 16 : bytes);
  if (c != cudaSuccess) {
    p = nullptr;
    error = cuda_error(what, c);
    return false;
  }
  buffers_.push_back(p);
  return true;
}

bool NcclBaseline::setup(RankSession& session, const Options& options, std::string& error) {
  s_ = &session;
  o_ = options;
  ht_ = options.mode == "ht";
  R_ = session.nranks();
  E_ = options.experts;
  L_ = E_ / R_;
  H_ = options.hidden;
  K_ = options.topk;
  T_ = options.group_max_tokens();
  const bool fp8 = ht_ && options.dtype == "fp8";
  const size_t T = static_cast<size_t>(T_), R = static_cast<size_t>(R_), K = static_cast<size_t>(K_);
  const size_t combine_row = static_cast<size_t>(H_) * 2;
  const size_t payload_row = fp8 ? static_cast<size_t>(H_) : combine_row;
  const size_t scales_row = static_cast<size_t>(H_ / 128) * 4;
  const size_t meta_row = 2 * K * 4;
  // LL packs a row per selection and may receive every peer's; HT a row per (token,
  // destination), at most one per (source, token).
  const size_t width = ht_ ? R : K;
  const size_t sent_rows = T * (ht_ ? std::min(K, R) : K);
  const size_t received_rows = ht_ ? T * R : sent_rows * R;
  const size_t bins = ht_ ? R : static_cast<size_t>(E_);
  const size_t peer_counts = R * (ht_ ? 1 : static_cast<size_t>(L_));
  void *send = nullptr, *recv = nullptr;
  if (!allocate(x_, T * payload_row, "baseline x", error) ||
      !allocate(count_input_, sent_rows * 4, "baseline count input", error) ||
      !allocate(src_token_, sent_rows * 4, "baseline pack order", error) ||
      !allocate(pos_, T * width * 4, "baseline positions", error) ||
      !allocate(weights_, T * width * 4, "baseline weights", error) ||
      !allocate(counts_, bins * 4, "baseline counts", error) ||
      !allocate(peer_counts_, peer_counts * 4, "baseline peer counts", error) ||
      !allocate(send, sent_rows * payload_row, "baseline send buffer", error) ||
      !allocate(recv, received_rows * payload_row, "baseline receive buffer", error) ||
      !allocate(expert_out_, received_rows * combine_row, "baseline expert outputs", error) ||
      !allocate(returned_, sent_rows * combine_row, "baseline combine buffer", error) ||
      !allocate(out_, T * combine_row, "baseline output", error)) {
    return false;
  }
  lanes_.push_back(Lane{x_, send, recv, payload_row});
  if (fp8) {
    void *send_scales = nullptr, *recv_scales = nullptr;
    if (!allocate(x_scales_, T * scales_row, "baseline x scales", error) ||
        !allocate(send_scales, sent_rows * scales_row, "baseline send scales", error) ||
        !allocate(recv_scales, received_rows * scales_row, "baseline receive scales", error)) {
      return false;
    }
    lanes_.push_back(Lane{x_scales_, send_scales, recv_scales, scales_row});
    TRY_CUDA(fill_u32(x_scales_, kFp32One, T * scales_row / 4, s_->stream()), "filling baseline scales");
  }
  if (ht_) {
    void* send_meta = nullptr;
    if (!allocate(meta_, T * meta_row, "baseline routing rows", error) ||
        !allocate(send_meta, sent_rows * meta_row, "baseline send routing", error) ||
        !allocate(recv_meta_, received_rows * meta_row, "baseline receive routing", error) ||
        !allocate(recv_expert_counts_, static_cast<size_t>(L_) * 4, "baseline expert counts", error)) {
      return false;
    }
    lanes_.push_back(Lane{meta_, send_meta, recv_meta_, meta_row});
  }
  TRY_CUDA(cudaMallocHost(reinterpret_cast<void**>(&host_counts_), (bins + peer_counts) * 4), "baseline pinned counts");
  if (fp8) {
    TRY_CUDA(cudaMemsetAsync(x_, kFp8E4m3One, T * payload_row, s_->stream()), "filling baseline x");
  } else {
    TRY_CUDA(fill_u16(x_, kBf16One, T * H_, s_->stream()), "filling baseline x");
  }
  TRY_CUDA(fill_u16(expert_out_, kBf16One, received_rows * H_, s_->stream()), "filling baseline expert outputs");
  TRY_CUDA(cudaStreamSynchronize(s_->stream()), "filling baseline buffers");
  return true;
}

bool NcclBaseline::prepare(const PointInput& in, std::string& error) {
  B_ = in.tokens;
  plan_ = ht_ ? ht_baseline_plan(*in.routing, B_, K_, E_, R_) : ll_baseline_plan(*in.routing, B_, K_, E_, R_);
  rows_ = plan_.rows();
  const cudaStream_t st = s_->stream();
  auto upload = [&](void* to, const void* from, size_t bytes) {
    return bytes == 0 || cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, st) == cudaSuccess;
  };
  if (!upload(count_input_, plan_.count_input.data(), plan_.count_input.size() * 4) ||
      !upload(src_token_, plan_.src_token.data(), plan_.src_token.size() * 4) ||
      !upload(pos_, plan_.pos.data(), plan_.pos.size() * 4) ||
      !upload(weights_, plan_.weights.data(), plan_.weights.size() * 4) ||
      (ht_ && !upload(meta_, plan_.meta.data(), plan_.meta.size() * 4))) {
    error = cuda_error("baseline upload", cudaGetLastError());
    return false;
  }
  TRY_CUDA(cudaStreamSynchronize(st), "baseline upload");
  return true;
}

bool NcclBaseline::exchange_rows(const std::vector<Lane>& lanes, bool back, const char* what, std::string& error) {
  const cudaStream_t st = s_->stream();
  const ncclComm_t comm = static_cast<ncclComm_t>(s_->comm());
  const std::vector<int64_t>& out_rows = back ? rows_from_ : rows_to_;
  const std::vector<int64_t>& out_offset = back ? recv_offset_ : send_offset_;
  const std::vector<int64_t>& in_rows = back ? rows_to_ : rows_from_;
  const std::vector<int64_t>& in_offset = back ? send_offset_ : recv_offset_;
  TRY_NCCL(ncclGroupStart(), "ncclGroupStart");
  for (int p = 0; p < R_; ++p) {
    const size_t q = static_cast<size_t>(p);
    for (const Lane& lane : lanes) {
      if (out_rows[q] > 0) {
        TRY_NCCL(ncclSend(static_cast<const char*>(lane.send) + out_offset[q] * lane.row_bytes,
                          out_rows[q] * lane.row_bytes, ncclChar, p, comm, st),
                 what);
      }
      if (in_rows[q] > 0) {
        TRY_NCCL(ncclRecv(static_cast<char*>(lane.recv) + in_offset[q] * lane.row_bytes, in_rows[q] * lane.row_bytes,
                          ncclChar, p, comm, st),
                 what);
      }
    }
  }
  TRY_NCCL(ncclGroupEnd(), what);
  return true;
}

bool NcclBaseline::dispatch(StepMarks* m, int iter, std::string& error) {
  const cudaStream_t st = s_->stream();
  const ncclComm_t comm = static_cast<ncclComm_t>(s_->comm());
  const int bins = plan_.count_bins, per_peer = plan_.counts_per_peer;
  if (m) m->record(iter, kStart, st);
  TRY_CUDA(launch_histogram(static_cast<const int32_t*>(count_input_), static_cast<int>(plan_.count_input.size()), 1, 1,
                            0, bins, static_cast<int32_t*>(counts_), st),
           "baseline counts");
  for (const Lane& lane : lanes_) {
    TRY_CUDA(launch_gather_rows(lane.source, static_cast<const int32_t*>(src_token_), rows_,
                                static_cast<int>(lane.row_bytes), lane.send, st),
             "baseline pack");
  }
  TRY_NCCL(ncclGroupStart(), "ncclGroupStart");
  for (int p = 0; p < R_; ++p) {
    TRY_NCCL(
        ncclSend(static_cast<int32_t*>(counts_) + static_cast<size_t>(p) * per_peer, per_peer, ncclInt32, p, comm, st),
        "ncclSend (counts)");
    TRY_NCCL(ncclRecv(static_cast<int32_t*>(peer_counts_) + static_cast<size_t>(p) * per_peer, per_peer, ncclInt32, p,
                      comm, st),
             "ncclRecv (counts)");
  }
  TRY_NCCL(ncclGroupEnd(), "ncclGroupEnd (counts)");
  TRY_CUDA(cudaMemcpyAsync(host_counts_, counts_, static_cast<size_t>(bins) * 4, cudaMemcpyDeviceToHost, st),
           "copying counts to the host");
  TRY_CUDA(cudaMemcpyAsync(host_counts_ + bins, peer_counts_, static_cast<size_t>(R_) * per_peer * 4,
                           cudaMemcpyDeviceToHost, st),
           "copying counts to the host");
  TRY_CUDA(cudaStreamSynchronize(st), "waiting for the count exchange");
  rows_to_.assign(static_cast<size_t>(R_), 0);
  rows_from_.assign(static_cast<size_t>(R_), 0);
  send_offset_.assign(static_cast<size_t>(R_), 0);
  recv_offset_.assign(static_cast<size_t>(R_), 0);
  received_ = 0;
  for (int p = 0; p < R_; ++p) {
    const size_t q = static_cast<size_t>(p);
    for (int i = 0; i < per_peer; ++i) {
      rows_to_[q] += host_counts_[p * per_peer + i];
      rows_from_[q] += host_counts_[bins + p * per_peer + i];
    }
    if (p > 0) {
      send_offset_[q] = send_offset_[q - 1] + rows_to_[q - 1];
      recv_offset_[q] = recv_offset_[q - 1] + rows_from_[q - 1];
    }
    received_ += static_cast<int>(rows_from_[q]);
  }
  if (!exchange_rows(lanes_, false, "grouped ncclSend/ncclRecv (rows)", error)) return false;
  if (ht_) {
    // Received (token, entry) pairs per local expert: the routing each row carried.
    TRY_CUDA(launch_histogram(static_cast<const int32_t*>(recv_meta_), received_, K_, 2 * K_, s_->rank() * L_, L_,
                              static_cast<int32_t*>(recv_expert_counts_), st),
             "baseline expert counts");
  }
  if (m) m->record(iter, kDispatchDone, st);
  return true;
}

bool NcclBaseline::combine(StepMarks* m, int iter, std::string& error) {
  const cudaStream_t st = s_->stream();
  const std::vector<Lane> back = {Lane{nullptr, expert_out_, returned_, static_cast<size_t>(H_) * 2}};
  if (!exchange_rows(back, true, "grouped ncclSend/ncclRecv (expert outputs)", error)) return false;
  TRY_CUDA(
      launch_weighted_sum(static_cast<const uint16_t*>(returned_), static_cast<const int32_t*>(pos_),
                          static_cast<const float*>(weights_), B_, plan_.width, H_, static_cast<uint16_t*>(out_), st),
      "baseline combine sum");
  if (m) m->record(iter, kCombineDone, st);
  return true;
}

bool NcclBaseline::check(const PointInput& in, std::string& error) {
  for (int p = 0; p < R_; ++p) {
    if (rows_to_[static_cast<size_t>(p)] != in.traffic->baseline_rows_to[static_cast<size_t>(p)] ||
        rows_from_[static_cast<size_t>(p)] != in.traffic->baseline_rows_from[static_cast<size_t>(p)]) {
      error = "the baseline's count exchange with rank " + std::to_string(p) + " disagrees with the routing";
      return false;
    }
  }
  std::string why;
  if (ht_) {
    std::vector<int32_t> counts(static_cast<size_t>(L_));
    TRY_CUDA(cudaMemcpy(counts.data(), recv_expert_counts_, counts.size() * 4, cudaMemcpyDeviceToHost),
             "reading the baseline's expert counts");
    if (!check_counts(counts, in.traffic->expected_counts, why)) {
      error = "the baseline received wrong routing: " + why;
      return false;
    }
  }
  std::vector<uint16_t> out(static_cast<size_t>(B_) * H_);
  TRY_CUDA(cudaMemcpy(out.data(), out_, out.size() * 2, cudaMemcpyDeviceToHost), "reading the baseline output");
  const std::vector<float> expected =
      ht_ ? expected_ht_combine(*in.routing, B_, K_, L_, R_) : expected_combine(*in.routing, B_, K_, L_, R_, false);
  if (!check_combined(out, B_, H_, expected, why)) {
    error = "the baseline computed a wrong result: " + why;
    return false;
  }
  return true;
}

bool NcclBaseline::measure(const PointInput& in, MetricList& out, std::string& error) {
  if (!prepare(in, error)) return false;
  const StepCalls step{[this](StepMarks* m, int iter, std::string& e) { return dispatch(m, iter, e); },
                       [this](StepMarks* m, int iter, std::string& e) { return combine(m, iter, e); }};
  MetricList kernel;
  if (!time_kernels("baseline", s_->stream(), in.warmup, in.iters, false, step, kernel, error) || !check(in, error)) {
    return false;
  }
  out.insert(out.end(), kernel.begin(), kernel.end());
  return time_api("baseline", s_->stream(), in.iters, step, out, error);
}

}  // namespace epc::bench
