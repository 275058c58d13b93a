// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the low-latency dispatch/combine GPU tests (test_ll.cpp); what both modes
// share (status helpers, owners, comparison) is in gpu_case_common.hpp.
//
// Every rank builds the SAME reference Problem from the same seed (and the same expert
// outputs y for every rank), runs the CPU reference model for all ranks, and keeps only what
// it needs: its own inputs and the results expected on this rank. Its device buffers hold
// only its own part. Helpers that call into CUDA or epcomm return an AssertionResult so that
// tests can ASSERT_TRUE on them; data mismatches are reported with ADD_FAILURE (one line per
// kind of output, naming the first mismatch) and never stop a test early, so the collective
// calls of the following steps still line up across ranks.
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

namespace epc::gputest::ll {

// ---- Shapes, groups, problems -------------------------------------------------------------

// The group's shape: what EpcGroupConfig and every [L, R*T, H] buffer are sized from.
using LlShape = Shape;

// Expert outputs for every rank q: bf16 [L, R*T, H]; the first counts[q][l] rows of each
// expert hold values drawn from `seed` (uniform in [-2, 2), rounded to bf16), later rows are
// zero. Deterministic: every rank computes the same values for every rank.
std::vector<std::vector<uint16_t>> make_expert_outputs(const ref::Problem& problem, uint64_t seed);

// One step as seen from `rank`: the whole Problem (the same on every rank), this rank's
// expert outputs, and what the reference model says this rank must end up with.
struct LlStep {
  ref::Problem problem;
  int rank = 0;
  std::vector<uint16_t> y;                  // this rank's expert outputs [L, R*T, H]
  std::vector<int32_t> want_counts;         // [L]
  ref::LlDispatchOptions dispatch_options;  // use_fp8: EPC_QUANT_FP8
  std::vector<uint16_t> want_x;             // [L, R*T, H] (rows past counts are zero)
  std::vector<uint8_t> want_x_fp8;          // [L, R*T, H] with use_fp8
  std::vector<float> want_scales;           // [L, R*T, H/128] with use_fp8
  std::vector<ref::SourceRef> want_src;     // [L, R*T], for messages
  std::vector<float> want_out_sums;         // [B, H] kPerRankPrereduce, before rounding
  std::vector<uint16_t> want_out;           // [B, H] the sums rounded to bf16

  const ref::RankTokens& mine() const { return problem.ranks[rank]; }
  int tokens() const { return mine().num_tokens; }
};

// Runs ll_dispatch (with `options`) and ll_combine_sums (kPerRankPrereduce) of the reference
// model over all ranks with y from make_expert_outputs(problem, y_seed); keeps this rank's part.
// Throws (via the reference model) on an invalid problem.
LlStep make_step(ref::Problem problem, uint64_t y_seed, int rank, const ref::LlDispatchOptions& options = {});

// A random problem of `shape` with top-k `topk`, B_r uniform in [0, T] when
// random_token_counts, each entry masked with probability masked_fraction.
ref::Problem random_problem(const LlShape& shape, int topk, uint64_t seed, bool random_token_counts,
                            double masked_fraction);

// Makes `rank` hold no tokens (B_r = 0).
void clear_rank(ref::Problem& problem, int rank);

// ---- Device buffers of one step ----------------------------------------------------------

// Which outputs beyond out_x, out_scales and out_expert_counts the calls name.
struct LlOutputs {
  EpcDtype out_dtype = EPC_DTYPE_BF16;  // combine `out`: bf16, fp16 or fp32
  bool counts_host = false;             // dispatch out_expert_counts_host (pinned)
  bool acc_counts = false;              // dispatch acc_expert_counts (int64, accumulated)
  bool dispatch_weights = true;         // dispatch passes topk_weights (HOME combines need none)
};

// The device side of one step on this rank: inputs x [T, H], topk_idx [T, K] (int64 or
// int32), topk_weights [T, K]; outputs out_x [L, R*T, H] (bf16, or e4m3 bytes when the step
// uses fp8), out_scales [L, R*T, H/128] (when H % 128 == 0), out_counts [L]; expert outputs
// expert_out [L, R*T, H] (a separate buffer, so y can be written before the step's dispatch
// and no host synchronisation is needed inside a step); out [T, H]. The tensors handed to
// epcomm use the current step's B rows. With LlOutputs::counts_host a pinned [L] int32 copy of
// the counts; with acc_counts a device [L] int64 accumulator, zeroed by allocate().
class LlBuffers {
 public:
  ::testing::AssertionResult allocate(const LlShape& shape, int topk, EpcDtype idx_dtype = EPC_DTYPE_INT64,
                                      const LlOutputs& outputs = {});

  // Copies the step's inputs and y into device memory and poisons every output with 0xFF
  // bytes (bf16 NaN, counts -1), all stream-ordered on `stream`. The host copies stay alive
  // in `step`, which the caller keeps until the stream has passed the copies. Every upload
  // stands for one dispatch: the accumulated counts check() expects add the step's counts.
  ::testing::AssertionResult upload(const LlStep& step, cudaStream_t stream);

  // Tensors for the step last uploaded (B = its token count).
  EpcTensor x() const;
  EpcTensor topk_idx() const;
  EpcTensor topk_weights() const;
  EpcTensor out_x() const;
  EpcTensor out_scales() const;
  EpcTensor out_counts() const;
  EpcTensor out_counts_host() const;
  EpcTensor acc_counts() const;
  // The last uploaded step's dispatch options (use_fp8 selects EPC_QUANT_FP8).
  const ref::LlDispatchOptions& dispatch_options() const { return options_; }
  const LlOutputs& outputs() const { return outputs_; }
  // Whether call_dispatch passes the uploaded step's bound, the most tokens any rank has in it,
  // as EpcDispatchArgs.max_step_tokens (ABI 2.2), or 0 (the group's T).
  void bound_steps(bool on) { bound_steps_ = on; }
  uint32_t max_step_tokens() const { return bound_steps_ ? step_bound_ : 0; }
  EpcTensor expert_out() const;
  EpcTensor out() const;

  // Waits for `stream`, downloads counts, out_x and out, and compares them bitwise with the
  // step's expected results (counts; the first want_counts[l] rows of each expert; every
  // [B, H] element of out in its dtype; the host counts and the accumulated counts when
  // named). Each mismatching kind is reported with one ADD_FAILURE line
  // naming `label` and the first mismatch. Returns true when everything matched. `report`
  // false checks silently (for tests that cap how many failing steps they print).
  bool check(const LlStep& step, cudaStream_t stream, const std::string& label, bool report = true);

  int tokens() const { return tokens_; }

 private:
  LlShape shape_;
  int topk_ = 0;
  EpcDtype idx_dtype_ = EPC_DTYPE_INT64;
  int tokens_ = 0;
  bool bound_steps_ = false;
  uint32_t step_bound_ = 0;
  ref::LlDispatchOptions options_;
  LlOutputs outputs_;
  DeviceMemory x_, idx_, weights_, out_x_, scales_, counts_, expert_out_, out_, acc_;
  PinnedMemory counts_host_;
  std::vector<int32_t> idx32_;  // staging for int32 routing
  std::vector<int64_t> want_acc_;
  std::vector<int32_t> got_counts_;
  std::vector<int64_t> got_acc_;
  std::vector<uint16_t> got_x_;
  std::vector<uint8_t> got_x_fp8_;
  std::vector<float> got_scales_;
  std::vector<uint16_t> got_out_;
  std::vector<float> got_out32_;
};

// ---- The epcomm calls of one step ----------------------------------------------------------

// Step flags of epc_dispatch / epc_combine (EPC_STEP_SEND_ONLY).
using StepFlags = uint32_t;

// epc_handle_create (default config, with routing) / epc_handle_update from
// buffers.topk_idx().
::testing::AssertionResult create_handle(EpcGroup* group, const LlBuffers& buffers, cudaStream_t stream,
                                         HandlePtr& out);
::testing::AssertionResult update_handle(EpcHandle* handle, const LlBuffers& buffers, cudaStream_t stream);

// epc_dispatch / epc_combine with the buffers' tensors, `flags`, `send_sms` (ABI 2.1) and the
// buffers' max_step_tokens (dispatch, ABI 2.2), nothing else: quant EPC_QUANT_FP8 when the buffers' step uses fp8 (with
// EPC_DISPATCH_POW2_SCALES for UE8M0 scales), the outputs LlOutputs names. The status as it is.
EpcStatus call_dispatch(EpcHandle* handle, const LlBuffers& buffers, StepFlags flags, cudaStream_t stream,
                        uint32_t send_sms = 0);
EpcStatus call_combine(EpcHandle* handle, const LlBuffers& buffers, StepFlags flags, cudaStream_t stream,
                       uint32_t send_sms = 0);

// call_dispatch / call_combine as AssertionResults; with EPC_STEP_SEND_ONLY followed at once
// by epc_complete on the same stream.
::testing::AssertionResult dispatch(EpcHandle* handle, const LlBuffers& buffers, StepFlags flags, cudaStream_t stream);
::testing::AssertionResult combine(EpcHandle* handle, const LlBuffers& buffers, StepFlags flags, cudaStream_t stream);

// dispatch then combine, no host synchronisation in between.
::testing::AssertionResult dispatch_and_combine(EpcHandle* handle, const LlBuffers& buffers, cudaStream_t stream,
                                                StepFlags dispatch_flags = 0, StepFlags combine_flags = 0);

// Runs `problems` one after another on ONE handle of `group`: created from the first problem's
// routing, updated (epc_handle_update) with each later one. Per step: upload x, routing,
// weights and y; update; dispatch; combine (no host synchronisation between them); then wait
// and compare with the reference. Problem s uses y seed y_seed + s. `bound_steps`: each
// dispatch passes its step's bound (LlBuffers::bound_steps).
void run_sequence(EpcGroup* group, const LlShape& shape, const std::vector<ref::Problem>& problems, uint64_t y_seed,
                  const std::string& label, EpcDtype idx_dtype = EPC_DTYPE_INT64, StepFlags dispatch_flags = 0,
                  StepFlags combine_flags = 0, const ref::LlDispatchOptions& options = {},
                  const LlOutputs& outputs = {}, bool bound_steps = false);

// ---- Passthrough (EPC_QUANT_PASSTHROUGH) ---------------------------------------------------

// Gives every rank's tokens an x_quant row and x_scale_bytes of `format`, bytes drawn from
// `seed` (every byte value: NaN, e8m0 0xFF), the same on every rank; drops the 16-bit x.
void fill_passthrough(ref::Problem& problem, const ref::PassthroughFormat& format, uint64_t seed);

// What `rank` must hold after a passthrough dispatch in `layout`, over out_x's rows
// (EXPERT_PADDED: L * R*T, expert-major; RANK_MAJOR and FLAT: R * T), from the reference
// model (ll_dispatch, ll_dispatch_tokens with the passthrough option).
struct PassthroughRows {
  int rows = 0;
  int row_bytes = 0;
  int scale_bytes = 0;
  std::vector<uint8_t> written;        // [rows]: 1 where the step writes the row
  std::vector<uint8_t> x;              // [rows, row_bytes]
  std::vector<uint8_t> scales;         // [rows, scale_bytes]
  std::vector<int32_t> expert_counts;  // [L]: rows per expert (token layouts: entries)
};
PassthroughRows passthrough_rows(const ref::Problem& problem, EpcLayout layout, const ref::PassthroughFormat& format,
                                 int rank);

}  // namespace epc::gputest::ll
