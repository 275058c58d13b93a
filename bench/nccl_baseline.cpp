#include "bench/nccl_baseline.hpp"

#include <nccl.h>

#include <algorithm>

#include "bench/baseline_kernels.hpp"
#include "bench/device_fill.hpp"
#include "bench/output_check.hpp"
#include "bench/try_call.hpp"

namespace epc::bench {
namespace {

enum Mark { kStart, kDispatchDone, kCombineDone, kMarks };

}  // namespace

NcclBaseline::~NcclBaseline() { teardown(); }

void NcclBaseline::teardown() {
  for (void* p : buffers_) cudaFree(p);
  buffers_.clear();
  if (host_counts_ != nullptr) cudaFreeHost(host_counts_);
  host_counts_ = nullptr;
}

bool NcclBaseline::setup(RankSession& session, const Options& options, std::string& error) {
  s_ = &session;
  o_ = options;
  R_ = session.nranks();
  E_ = options.experts;
  L_ = E_ / R_;
  H_ = options.hidden;
  K_ = options.topk;
  T_ = options.group_max_tokens();
  const size_t row = static_cast<size_t>(H_) * 2;
  const size_t sent_rows = static_cast<size_t>(T_) * K_;
  const size_t received_rows = sent_rows * R_;  // every peer may pick only our experts
  auto allocate = [&](void*& p, size_t bytes, const char* what) {
    const cudaError_t c = cudaMalloc(&p, bytes == 0 ? 16 : bytes);
    if (c != cudaSuccess) {
      p = nullptr;
      error = cuda_error(what, c);
      return false;
    }
    buffers_.push_back(p);
    return true;
  };
  if (!allocate(x_, static_cast<size_t>(T_) * row, "baseline x") ||
      !allocate(idx_, sent_rows * 4, "baseline topk_idx") ||
      !allocate(weights_, sent_rows * 4, "baseline weights") ||
      !allocate(src_token_, sent_rows * 4, "baseline pack order") ||
      !allocate(pos_, sent_rows * 4, "baseline positions") ||
      !allocate(expert_counts_, static_cast<size_t>(E_) * 4, "baseline counts") ||
      !allocate(peer_counts_, static_cast<size_t>(R_) * L_ * 4, "baseline peer counts") ||
      !allocate(send_, sent_rows * row, "baseline send buffer") ||
      !allocate(recv_, received_rows * row, "baseline receive buffer") ||
      !allocate(expert_out_, received_rows * row, "baseline expert outputs") ||
      !allocate(returned_, sent_rows * row, "baseline combine buffer") ||
      !allocate(out_, static_cast<size_t>(T_) * row, "baseline output")) {
    return false;
  }
  TRY_CUDA(cudaMallocHost(reinterpret_cast<void**>(&host_counts_),
                          (static_cast<size_t>(E_) + static_cast<size_t>(R_) * L_) * 4),
           "baseline pinned counts");
  TRY_CUDA(fill_u16(x_, kBf16One, static_cast<size_t>(T_) * H_, s_->stream()), "filling baseline x");
  TRY_CUDA(fill_u16(expert_out_, kBf16One, received_rows * H_, s_->stream()),
           "filling baseline expert outputs");
  TRY_CUDA(cudaStreamSynchronize(s_->stream()), "filling baseline buffers");
  return true;
}

bool NcclBaseline::prepare(const PointInput& in, std::string& error) {
  B_ = in.tokens;
  const Routing& routing = *in.routing;
  std::vector<int32_t> idx(routing.size());
  for (size_t i = 0; i < routing.size(); ++i) idx[i] = static_cast<int32_t>(routing[i]);
  // The pack order: selections sorted by expert (so grouped by destination), then token.
  std::vector<int32_t> entries;
  for (int i = 0; i < static_cast<int>(routing.size()); ++i) {
    if (routing[static_cast<size_t>(i)] >= 0) entries.push_back(i);
  }
  std::stable_sort(entries.begin(), entries.end(), [&](int32_t a, int32_t b) {
    return routing[static_cast<size_t>(a)] < routing[static_cast<size_t>(b)];
  });
  std::vector<int32_t> src_token(entries.size()), pos(routing.size(), -1);
  for (size_t j = 0; j < entries.size(); ++j) {
    src_token[j] = entries[j] / K_;
    pos[static_cast<size_t>(entries[j])] = static_cast<int32_t>(j);
  }
  selections_ = static_cast<int>(entries.size());
  std::vector<float> weights(routing.size(), 1.0f / static_cast<float>(K_));
  const cudaStream_t st = s_->stream();
  TRY_CUDA(cudaMemcpyAsync(idx_, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice, st), "baseline upload");
  TRY_CUDA(cudaMemcpyAsync(weights_, weights.data(), weights.size() * 4, cudaMemcpyHostToDevice, st),
           "baseline upload");
  TRY_CUDA(cudaMemcpyAsync(src_token_, src_token.data(), src_token.size() * 4, cudaMemcpyHostToDevice, st),
           "baseline upload");
  TRY_CUDA(cudaMemcpyAsync(pos_, pos.data(), pos.size() * 4, cudaMemcpyHostToDevice, st), "baseline upload");
  TRY_CUDA(cudaStreamSynchronize(st), "baseline upload");
  return true;
}

bool NcclBaseline::dispatch(EventMarks* m, int iter, std::string& error) {
  const cudaStream_t st = s_->stream();
  const ncclComm_t comm = static_cast<ncclComm_t>(s_->comm());
  const size_t row = static_cast<size_t>(H_) * 2;
  if (m) m->record(iter, kStart, st);
  TRY_CUDA(launch_expert_histogram(static_cast<const int32_t*>(idx_), B_ * K_, E_,
                                   static_cast<int32_t*>(expert_counts_), st), "baseline histogram");
  TRY_CUDA(launch_gather_rows(x_, static_cast<const int32_t*>(src_token_), selections_,
                              static_cast<int>(row), send_, st), "baseline pack");
  TRY_NCCL(ncclGroupStart(), "ncclGroupStart");
  for (int p = 0; p < R_; ++p) {
    TRY_NCCL(ncclSend(static_cast<int32_t*>(expert_counts_) + static_cast<size_t>(p) * L_, L_, ncclInt32,
                      p, comm, st), "ncclSend (counts)");
    TRY_NCCL(ncclRecv(static_cast<int32_t*>(peer_counts_) + static_cast<size_t>(p) * L_, L_, ncclInt32,
                      p, comm, st), "ncclRecv (counts)");
  }
  TRY_NCCL(ncclGroupEnd(), "ncclGroupEnd (counts)");
  TRY_CUDA(cudaMemcpyAsync(host_counts_, expert_counts_, static_cast<size_t>(E_) * 4,
                           cudaMemcpyDeviceToHost, st), "copying counts to the host");
  TRY_CUDA(cudaMemcpyAsync(host_counts_ + E_, peer_counts_, static_cast<size_t>(R_) * L_ * 4,
                           cudaMemcpyDeviceToHost, st), "copying counts to the host");
  TRY_CUDA(cudaStreamSynchronize(st), "waiting for the count exchange");
  rows_to_.assign(static_cast<size_t>(R_), 0);
  rows_from_.assign(static_cast<size_t>(R_), 0);
  send_offset_.assign(static_cast<size_t>(R_), 0);
  recv_offset_.assign(static_cast<size_t>(R_), 0);
  for (int p = 0; p < R_; ++p) {
    for (int l = 0; l < L_; ++l) {
      rows_to_[static_cast<size_t>(p)] += host_counts_[p * L_ + l];
      rows_from_[static_cast<size_t>(p)] += host_counts_[E_ + p * L_ + l];
    }
    if (p > 0) {
      send_offset_[static_cast<size_t>(p)] = send_offset_[static_cast<size_t>(p - 1)] + rows_to_[static_cast<size_t>(p - 1)];
      recv_offset_[static_cast<size_t>(p)] = recv_offset_[static_cast<size_t>(p - 1)] + rows_from_[static_cast<size_t>(p - 1)];
    }
  }
  TRY_NCCL(ncclGroupStart(), "ncclGroupStart");
  for (int p = 0; p < R_; ++p) {
    const size_t to = static_cast<size_t>(rows_to_[static_cast<size_t>(p)]);
    const size_t from = static_cast<size_t>(rows_from_[static_cast<size_t>(p)]);
    if (to > 0) {
      TRY_NCCL(ncclSend(static_cast<char*>(send_) + send_offset_[static_cast<size_t>(p)] * row, to * row,
                        ncclChar, p, comm, st), "ncclSend (rows)");
    }
    if (from > 0) {
      TRY_NCCL(ncclRecv(static_cast<char*>(recv_) + recv_offset_[static_cast<size_t>(p)] * row, from * row,
                        ncclChar, p, comm, st), "ncclRecv (rows)");
    }
  }
  TRY_NCCL(ncclGroupEnd(), "ncclGroupEnd (rows)");
  if (m) m->record(iter, kDispatchDone, st);
  return true;
}

bool NcclBaseline::combine(EventMarks* m, int iter, std::string& error) {
  const cudaStream_t st = s_->stream();
  const ncclComm_t comm = static_cast<ncclComm_t>(s_->comm());
  const size_t row = static_cast<size_t>(H_) * 2;
  TRY_NCCL(ncclGroupStart(), "ncclGroupStart");
  for (int p = 0; p < R_; ++p) {
    const size_t back = static_cast<size_t>(rows_from_[static_cast<size_t>(p)]);
    const size_t mine = static_cast<size_t>(rows_to_[static_cast<size_t>(p)]);
    if (back > 0) {
      TRY_NCCL(ncclSend(static_cast<char*>(expert_out_) + recv_offset_[static_cast<size_t>(p)] * row,
                        back * row, ncclChar, p, comm, st), "ncclSend (expert outputs)");
    }
    if (mine > 0) {
      TRY_NCCL(ncclRecv(static_cast<char*>(returned_) + send_offset_[static_cast<size_t>(p)] * row,
                        mine * row, ncclChar, p, comm, st), "ncclRecv (expert outputs)");
    }
  }
  TRY_NCCL(ncclGroupEnd(), "ncclGroupEnd (expert outputs)");
  TRY_CUDA(launch_weighted_sum(static_cast<const uint16_t*>(returned_), static_cast<const int32_t*>(pos_),
                               static_cast<const float*>(weights_), B_, K_, H_,
                               static_cast<uint16_t*>(out_), st), "baseline weighted sum");
  if (m) m->record(iter, kCombineDone, st);
  return true;
}

bool NcclBaseline::check(const PointInput& in, std::string& error) {
  for (int p = 0; p < R_; ++p) {
    if (rows_to_[static_cast<size_t>(p)] != in.traffic->baseline_rows_to[static_cast<size_t>(p)] ||
        rows_from_[static_cast<size_t>(p)] != in.traffic->baseline_rows_from[static_cast<size_t>(p)]) {
      error = "the baseline's count exchange with rank " + std::to_string(p) +
              " disagrees with the routing";
      return false;
    }
  }
  std::vector<uint16_t> out(static_cast<size_t>(B_) * H_);
  TRY_CUDA(cudaMemcpy(out.data(), out_, out.size() * 2, cudaMemcpyDeviceToHost), "reading the baseline output");
  std::string why;
  if (!check_combined(out, B_, H_, expected_combine(*in.routing, B_, K_, L_, R_, false), why)) {
    error = "the baseline computed a wrong result: " + why;
    return false;
  }
  return true;
}

bool NcclBaseline::measure(const PointInput& in, MetricList& out, std::string& error) {
  if (!prepare(in, error)) return false;
  const cudaStream_t st = s_->stream();
  for (int i = 0; i < o_.warmup; ++i) {
    if (!dispatch(nullptr, 0, error) || !combine(nullptr, 0, error)) return false;
  }
  EventMarks marks(o_.iters, kMarks);
  for (int i = 0; i < o_.iters; ++i) {
    if (!dispatch(&marks, i, error) || !combine(&marks, i, error)) return false;
  }
  TRY_CUDA(cudaStreamSynchronize(st), "running the baseline");
  std::vector<double> d, c, step;
  if (!marks.ok() || !marks.elapsed_us(kStart, kDispatchDone, d) ||
      !marks.elapsed_us(kDispatchDone, kCombineDone, c) || !marks.elapsed_us(kStart, kCombineDone, step)) {
    error = "reading the baseline's CUDA events";
    return false;
  }
  if (!check(in, error)) return false;
  out.emplace_back("baseline.kernel.dispatch", summarize(d));
  out.emplace_back("baseline.kernel.combine", summarize(c));
  out.emplace_back("baseline.kernel.step", summarize(step));

  std::vector<double> api_d, api_c, api_step;
  for (int i = 0; i < o_.iters; ++i) {
    const Clock::time_point t0 = Clock::now();
    if (!dispatch(nullptr, 0, error)) return false;
    TRY_CUDA(cudaStreamSynchronize(st), "baseline dispatch (API timing)");
    const Clock::time_point t1 = Clock::now();
    if (!combine(nullptr, 0, error)) return false;
    TRY_CUDA(cudaStreamSynchronize(st), "baseline combine (API timing)");
    const Clock::time_point t2 = Clock::now();
    api_d.push_back(us_between(t0, t1));
    api_c.push_back(us_between(t1, t2));
    api_step.push_back(us_between(t0, t2));
  }
  out.emplace_back("baseline.api.dispatch", summarize(api_d));
  out.emplace_back("baseline.api.combine", summarize(api_c));
  out.emplace_back("baseline.api.step", summarize(api_step));
  return true;
}

}  // namespace epc::bench
