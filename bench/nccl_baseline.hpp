// SPDX-License-Identifier: Apache-2.0
// The baseline: what a user without an EP library writes with NCCL's host API, measured in
// the same processes and on the same routing as ours. The host-side pack order comes from
// bench/baseline_plan.hpp (computed per point, outside the timing).
//   dispatch: a kernel counts rows per destination (LL: per expert; HT: per destination
//             rank), a kernel packs the rows grouped by destination (LL: one bf16 row per
//             (token, expert) selection; HT: one row per (token, destination rank), its fp8
//             scales, and the token's top-k ids and weights), grouped ncclSend/ncclRecv
//             exchange the counts, which are copied to the host, and the stream is
//             synchronised (the host needs the sizes), then grouped ncclSend/ncclRecv move
//             the rows; HT then counts the received (token, entry) pairs per local expert
//             (kernel), which our dispatch delivers too;
//   combine:  send the expert outputs back the same way (sizes are known by then), then a
//             kernel sums each token's returned rows: LL its K rows with their weights, HT
//             its rows from each destination rank (already weighted), in rank order.
// Received rows are left grouped by source (LL: by (source, expert)) rather than reordered
// expert-major: like the host-side pack order, this favours the baseline. LL rows are bf16
// whatever --dtype says (LL fp8 is cast inside our kernel); HT fp8 rows are the caller's.
#pragma once

#include <string>
#include <vector>

#include "bench/baseline_plan.hpp"
#include "bench/mode.hpp"

namespace epc::bench {

class NcclBaseline {
 public:
  NcclBaseline() = default;
  ~NcclBaseline();
  NcclBaseline(const NcclBaseline&) = delete;
  NcclBaseline& operator=(const NcclBaseline&) = delete;

  // Allocates for options.group_max_tokens() and options.mode. Local.
  bool setup(RankSession& session, const Options& options, std::string& error);
  // Collective. Appends "baseline.*" figures; fails if the baseline's own result is wrong.
  bool measure(const PointInput& in, MetricList& out, std::string& error);
  void teardown();

 private:
  // One array that travels with every packed row: packed from `source` (by token) into
  // `send`, received into `recv`.
  struct Lane {
    const void* source;
    void* send;
    void* recv;
    size_t row_bytes;
  };

  bool allocate(void*& p, size_t bytes, const char* what, std::string& error);
  bool prepare(const PointInput& in, std::string& error);
  bool dispatch(StepMarks* marks, int iter, std::string& error);
  bool combine(StepMarks* marks, int iter, std::string& error);
  // Grouped ncclSend/ncclRecv of every lane's rows with every rank: forward sends rows_to_
  // rows from send_offset_ and receives rows_from_ rows at recv_offset_; back the reverse.
  bool exchange_rows(const std::vector<Lane>& lanes, bool back, const char* what, std::string& error);
  bool check(const PointInput& in, std::string& error);

  RankSession* s_ = nullptr;
  Options o_;
  bool ht_ = false;
  int R_ = 0, L_ = 0, E_ = 0, H_ = 0, K_ = 0, T_ = 0;
  int B_ = 0;         // tokens of the current point
  int rows_ = 0;      // rows this rank packs at the current point
  int received_ = 0;  // rows it received in the last dispatch
  BaselinePlan plan_;
  std::vector<void*> buffers_;  // every cudaMalloc, freed by teardown
  void* x_ = nullptr;           // [T, payload row]
  void* x_scales_ = nullptr;    // HT fp8: [T, H/128] fp32
  void* meta_ = nullptr;        // HT: [T, 2K] top-k ids and weights
  void* count_input_ = nullptr;
  void* src_token_ = nullptr;
  void* pos_ = nullptr;
  void* weights_ = nullptr;
  void* counts_ = nullptr;       // [count_bins]
  void* peer_counts_ = nullptr;  // [R * counts_per_peer]
  void* recv_meta_ = nullptr;
  void* recv_expert_counts_ = nullptr;  // HT: [L]
  void* expert_out_ = nullptr;
  void* returned_ = nullptr;
  void* out_ = nullptr;
  std::vector<Lane> lanes_;         // what dispatch moves per row
  int32_t* host_counts_ = nullptr;  // pinned: [count_bins] mine, then [R * counts_per_peer] received
  std::vector<int64_t> rows_to_, rows_from_, send_offset_, recv_offset_;
};

}  // namespace epc::bench
