// The baseline: what a user without an EP library writes with NCCL's host API, measured in
// the same processes and on the same routing as ours.
//   dispatch: count rows per expert (kernel), pack one row per (token, expert) selection
//             grouped by destination (kernel), exchange the per-expert counts with grouped
//             ncclSend/ncclRecv, copy them to the host and synchronise (the host needs the
//             sizes), then grouped ncclSend/ncclRecv of the packed rows;
//   combine:  send the expert outputs back the same way (sizes are known by then), then a
//             weighted sum of each token's K returned rows (kernel).
// The pack order (a sort by expert) is computed on the host per point and uploaded outside
// the timing, and received rows are left grouped by (source, expert) rather than reordered
// expert-major: both choices favour the baseline. Rows are bf16 whatever --dtype says.
#pragma once

#include <string>
#include <vector>

#include "bench/mode.hpp"

namespace epc::bench {

class NcclBaseline {
 public:
  NcclBaseline() = default;
  ~NcclBaseline();
  NcclBaseline(const NcclBaseline&) = delete;
  NcclBaseline& operator=(const NcclBaseline&) = delete;

  // Allocates for options.group_max_tokens(). Local.
  bool setup(RankSession& session, const Options& options, std::string& error);
  // Collective. Appends "baseline.*" figures; fails if the baseline's own result is wrong.
  bool measure(const PointInput& in, MetricList& out, std::string& error);
  void teardown();

 private:
  bool prepare(const PointInput& in, std::string& error);
  bool dispatch(EventMarks* marks, int iter, std::string& error);
  bool combine(EventMarks* marks, int iter, std::string& error);
  bool check(const PointInput& in, std::string& error);

  RankSession* s_ = nullptr;
  Options o_;
  int R_ = 0, L_ = 0, E_ = 0, H_ = 0, K_ = 0, T_ = 0;
  int B_ = 0;           // tokens of the current point
  int selections_ = 0;  // rows this rank packs
  std::vector<void*> buffers_;  // every cudaMalloc, freed by teardown
  void* x_ = nullptr;
  void* idx_ = nullptr;
  void* weights_ = nullptr;
  void* src_token_ = nullptr;
  void* pos_ = nullptr;
  void* expert_counts_ = nullptr;
  void* peer_counts_ = nullptr;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  void* expert_out_ = nullptr;
  void* returned_ = nullptr;
  void* out_ = nullptr;
  int32_t* host_counts_ = nullptr;  // pinned: [E] mine, then [R * L] received
  std::vector<int64_t> rows_to_, rows_from_, send_offset_, recv_offset_;
};

}  // namespace epc::bench
