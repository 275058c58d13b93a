// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the high-throughput dispatch/combine GPU tests (test_ht.cpp).
//
// As in the low-latency tests, every rank builds the SAME reference Problem from the same
// seed (and the same combine inputs for every rank), runs the CPU reference model
// (ref::ht_dispatch, ref::ht_combine) for all ranks and keeps what it needs: its own inputs
// and the results expected on this rank. Its device buffers hold only its own part. Data
// mismatches are reported with ADD_FAILURE (one line per kind of output, naming the first
// mismatch) and never stop a test early, so later collective calls still line up.
//
// A step is one batch: its routing and payload (the Problem), the combine inputs of this rank
// (rows [N, H] bf16, and [N, K] fp32 backward weights for combine's topk_weights) and what the
// model says this rank must receive. The same step can run on an EXACT handle (rows = N) or
// a CAPACITY handle (rows = R*T; only the first N rows are compared, and combine input rows
// at or past N hold NaN garbage that must not reach any output).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "epcomm/epcomm.h"
#include "tests/gpu/gpu_case_common.hpp"
#include "tests/reference/problem_gen.hpp"
#include "tests/reference/reference.hpp"

namespace epc::gputest::ht {

// ---- Shapes, groups, problems -------------------------------------------------------------

// The group's shape (gpu_case_common.hpp); a CAPACITY handle has shape.max_rows() rows.
using HtShape = Shape;

// What a problem looks like beyond its shape.
struct ProblemSpec {
  int topk = 8;
  uint64_t seed = 1;
  int tokens = -1;                   // B on every rank (-1: the shape's T)
  bool random_token_counts = false;  // then B_r is uniform in [0, tokens]
  double masked_fraction = 0.0;      // each entry masked with this probability
  double hot_expert_share = 0.0;     // skew: each entry picks hot_expert with this probability
  int hot_expert = 0;
  bool duplicates = false;          // duplicate expert ids within a token's row
  int empty_rank = -1;              // this rank gets B = 0 (-1: none)
  bool fully_masked_token = false;  // one token of every rank with tokens has all K masked
  bool fp8 = false;                 // also fill x_fp8 / fp8_scales (quantize_row_fp8 of x)
};

ref::Problem make_problem(const HtShape& shape, const ProblemSpec& spec);

// Random routing of `topk` entries: B_r uniform in [0, T], ~10% of entries masked and one
// fully masked token per rank. Tests adjust the other fields.
ProblemSpec random_spec(int topk, uint64_t seed);

// New token payloads on the same routing (for reusing a handle, or as an output gradient):
// every rank's x becomes bf16 uniform in [-2, 2) drawn from `seed`; x_fp8 / fp8_scales, where
// present, become arbitrary e4m3 bytes (NaN patterns included) and arbitrary finite scales
// of any sign and magnitude, since the fp8 payload is copied unchanged.
void replace_payload(ref::Problem& problem, uint64_t seed);

// ---- Steps ----------------------------------------------------------------------------------

// One step as seen from `rank`: the whole Problem (the same on every rank), this rank's
// combine inputs, and what the reference model says this rank must end up with.
struct HtStep {
  ref::Problem problem;
  int rank = 0;
  bool fp8 = false;                  // dispatch the caller-quantized x_fp8 + fp8_scales
  bool global_ids = false;           // want.recv_topk_idx holds global expert ids
  ref::HtDispatchResult want;        // this rank's ht_dispatch result (N rows)
  std::vector<uint16_t> combine_x;   // [N, H] bf16: this rank's combine input rows
  std::vector<float> combine_w;      // [N, K]: backward weights this rank returns
  std::vector<float> want_out_sums;  // [B, H]: ht_combine's fp32 sums, before rounding
  std::vector<uint16_t> want_out;    // [B, H]: ht_combine of every rank's combine_x (bf16)
  std::vector<float> want_out_w;     // [B, K]: the backward weights this rank receives

  int64_t capacity = 0;  // the rows every rank keeps (0: no limit), as the model
                         // takes it (HtDispatchOptions::capacity)

  const ref::RankTokens& mine() const { return problem.ranks[rank]; }
  int tokens() const { return mine().num_tokens; }
  int num_recv() const { return want.num_recv; }  // rows that arrived
  int rows() const { return want.rows; }          // rows kept: num_recv() without a capacity
};

// Runs ht_dispatch (payload x, or x_fp8 with `fp8`) and ht_combine (with backward weights)
// over all ranks, with combine inputs for every rank q drawn from `combine_seed`: rows bf16
// uniform in [-2, 2), weights uniform in [0, 1). Keeps this rank's part. Throws (via the
// reference model) on an invalid problem. `node_size`: the group's ranks per node, for the
// combine order across nodes (0: one node). `global_ids`: the expected out_topk_idx holds
// global expert ids (a handle with EPC_HANDLE_GLOBAL_EXPERT_IDS). `capacity`: the rows every
// rank keeps (0: no limit; the handle's EpcHandleConfig.capacity, or the group's
// recv_capacity for an EXACT handle).
HtStep make_step(ref::Problem problem, uint64_t combine_seed, int rank, bool fp8 = false, int node_size = 0,
                 bool global_ids = false, int64_t capacity = 0);

// `count` steps with new routing each: step s is make_problem with seed spec.seed + 100 s,
// combined with seed spec.seed + 100 s + 1, as seen from `rank`.
std::vector<HtStep> make_steps(const HtShape& shape, ProblemSpec spec, int count, int rank);

// ---- Device buffers of one step ----------------------------------------------------------

// Which optional tensors a step's calls pass (the others are NULL).
struct CallOptions {
  bool topk_weights = true;  // dispatch topk_weights and out_topk_weights
  bool out_topk_idx = true;
  bool out_expert_counts = true;
  bool out_num_recv = true;
  bool backward_weights = true;         // combine topk_weights and out_topk_weights
  EpcDtype out_dtype = EPC_DTYPE_BF16;  // combine `out`: bf16, fp16 or fp32
  bool counts_host = false;             // dispatch out_expert_counts_host (pinned; needs
                                        // out_expert_counts, which it is compared with)
  bool acc_counts = false;              // dispatch acc_expert_counts (accumulated int64)
};
// Every optional tensor NULL, combine without backward weights.
CallOptions payload_only();

// The device side of one step on this rank, every [rows, ...] buffer sized for a CAPACITY
// handle (R*T rows): inputs x [T, H] (bf16 or e4m3 bytes), x_scales [T, H/128], topk_idx
// [T, K] (int64 or int32), topk_weights [T, K]; dispatch outputs out_x, out_scales,
// out_topk_idx, out_topk_weights, out_expert_counts [L], out_num_recv [1]; combine inputs
// combine_x [rows, H] bf16 and combine_w [rows, K]; combine outputs out [T, H] (bf16, fp16
// or fp32) and out_w [T, K]; a pinned [L] int32 for the host counts and a device [L] int64
// accumulator (zeroed by allocate). Tensors handed to epcomm use the current step's B and
// the handle's rows.
class HtBuffers {
 public:
  ::testing::AssertionResult allocate(const HtShape& shape, int topk, EpcDtype idx_dtype = EPC_DTYPE_INT64);

  // Copies the step's inputs into device memory: x (or x_fp8 + scales), routing, weights,
  // and the combine inputs (the first N rows; every later row and weight is NaN garbage).
  // Then poison_outputs(). Stream-ordered on `stream`; the caller keeps `step` alive until
  // the stream has passed the copies. An upload with options.acc_counts stands for one
  // dispatch: the accumulated counts check() expects add the step's counts.
  ::testing::AssertionResult upload(const HtStep& step, const CallOptions& options, cudaStream_t stream);
  // Fills every output with 0xFF bytes (bf16/fp32 NaN, int32 -1), stream-ordered.
  ::testing::AssertionResult poison_outputs(cudaStream_t stream);

  // The handle's sizing, rows (epc_handle_query) and EPC_HANDLE_* flags; the [rows, ...]
  // tensors use `rows`.
  void set_handle(EpcSizing sizing, int64_t rows, uint32_t flags = 0);

  EpcTensor x() const;
  EpcTensor x_scales() const;
  EpcTensor topk_idx() const;
  EpcTensor topk_weights() const;
  EpcTensor out_x() const;
  EpcTensor out_scales() const;
  EpcTensor out_topk_idx() const;
  EpcTensor out_topk_weights() const;
  EpcTensor out_expert_counts() const;
  EpcTensor out_num_recv() const;
  EpcTensor combine_x() const;
  EpcTensor combine_w() const;
  EpcTensor out() const;
  EpcTensor out_w() const;
  EpcTensor out_counts_host() const;
  EpcTensor acc_counts() const;

  // Waits for `stream`, downloads every output the options asked for and compares it bitwise
  // with the step's expected results: the handle's rows (N for EXACT, R*T for CAPACITY, or
  // as the step's capacity says), the first N rows of out_x (and out_scales), out_topk_idx,
  // out_topk_weights, the expert counts, N, then out [B, H] and out_w [B, K]; and that rows
  // of out_x, out_topk_idx and out_topk_weights past the handle's rows kept their poison
  // (nothing is written past a handle's rows). Each mismatching kind is one ADD_FAILURE line naming
  // `label` and the first mismatch. Returns true when everything matched; `report` false
  // checks silently.
  bool check(const HtStep& step, cudaStream_t stream, const std::string& label, bool report = true);

  const CallOptions& options() const { return options_; }
  bool fp8() const { return fp8_; }
  int tokens() const { return tokens_; }
  int64_t rows() const { return rows_; }

 private:
  HtShape shape_;
  int topk_ = 0;
  EpcDtype idx_dtype_ = EPC_DTYPE_INT64;
  int tokens_ = 0;
  bool fp8_ = false;
  CallOptions options_;
  EpcSizing sizing_ = EPC_SIZING_EXACT;
  int64_t rows_ = 0;
  uint32_t handle_flags_ = 0;
  DeviceMemory x_, x_scales_, idx_, weights_;
  DeviceMemory out_x_, out_scales_, out_idx_, out_weights_, out_counts_, out_num_recv_, acc_;
  DeviceMemory combine_x_, combine_w_, out_, out_w_;
  PinnedMemory counts_host_;
  std::vector<int32_t> idx32_;  // staging for int32 routing
  std::vector<int64_t> want_acc_, got_acc_;
  std::vector<uint16_t> got_x16_, got_out_;
  std::vector<uint8_t> got_x8_, got_past_x_, got_past_idx_, got_past_w_;
  std::vector<float> got_scales_, got_weights_, got_out_w_, got_out32_;
  std::vector<int32_t> got_idx_, got_counts_;
  int32_t got_num_recv_ = -1;
};

// ---- The epcomm calls of one step ----------------------------------------------------------

// epc_handle_create (sizing, flags) with routing from buffers.topk_idx(); tells the buffers
// the rows epc_handle_query reports.
::testing::AssertionResult create_handle(EpcGroup* group, HtBuffers& buffers, EpcSizing sizing, cudaStream_t stream,
                                         HandlePtr& out, uint32_t flags = 0);
// epc_handle_update from buffers.topk_idx() (CAPACITY handles).
::testing::AssertionResult update_handle(EpcHandle* handle, const HtBuffers& buffers, cudaStream_t stream);

// epc_dispatch / epc_combine with the tensors the buffers' step and options ask for (quant
// PASSTHROUGH for an fp8 step), `flags` and `send_sms`; the status as it is.
EpcStatus call_dispatch(EpcHandle* handle, const HtBuffers& buffers, cudaStream_t stream, uint32_t flags = 0,
                        uint32_t send_sms = 0);
EpcStatus call_combine(EpcHandle* handle, const HtBuffers& buffers, cudaStream_t stream, uint32_t flags = 0,
                       uint32_t send_sms = 0);

// call_dispatch / call_combine as AssertionResults.
::testing::AssertionResult dispatch(EpcHandle* handle, const HtBuffers& buffers, cudaStream_t stream);
::testing::AssertionResult combine(EpcHandle* handle, const HtBuffers& buffers, cudaStream_t stream);
// dispatch then combine, no host synchronisation in between.
::testing::AssertionResult dispatch_and_combine(EpcHandle* handle, const HtBuffers& buffers, cudaStream_t stream);

// Runs `steps` one after another, step s with options[s % options.size()]. A step whose
// routing (every rank's B and topk_idx) equals the previous step's reuses the handle as it
// is; otherwise EXACT sizing creates a new handle (the previous one destroyed) and CAPACITY
// sizing updates the one handle (epc_handle_update). Handles get `handle_flags`. Per step: upload, handle, dispatch,
// combine (no host synchronisation between them), then wait and compare.
void run_steps(EpcGroup* group, const HtShape& shape, const std::vector<HtStep>& steps, EpcSizing sizing,
               const std::vector<CallOptions>& options, const std::string& label, EpcDtype idx_dtype = EPC_DTYPE_INT64,
               uint32_t handle_flags = 0);

// True when both problems route the same tokens the same way (B and topk_idx of every rank).
bool same_routing(const ref::Problem& a, const ref::Problem& b);

}  // namespace epc::gputest::ht
