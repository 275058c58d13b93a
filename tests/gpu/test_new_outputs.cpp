// SPDX-License-Identifier: Apache-2.0
// What ABI 2.0 serves new in dispatch and combine outputs, in both modes, compared bit for
// bit with the CPU reference model:
//   - combine `out` in fp16 and fp32: the fp32 sum over ranks ascending (ll_combine_sums,
//     HtCombineResult::sums), unrounded for fp32, rounded once to fp16;
//   - HT out_topk_idx with EPC_HANDLE_GLOBAL_EXPERT_IDS: rank * L + local id, -1 stays
//     (ht_dispatch with global_expert_ids); on LL the flag is accepted and changes nothing;
//   - acc_expert_counts [L] int64: the sum of every step's per-expert counts;
//   - out_expert_counts_host [L] int32 in pinned memory: equal to the device counts once
//     the stream has passed the step, also after a send-only LL dispatch (queued by
//     epc_complete).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest {
namespace {

std::vector<ref::Problem> ll_problems(const Shape& shape, int topk, uint64_t seed, int count) {
  std::vector<ref::Problem> problems;
  for (int s = 0; s < count; ++s) {
    problems.push_back(ll::random_problem(shape, topk, seed + static_cast<uint64_t>(s), true, 0.1));
  }
  return problems;
}

// ---- Combine output dtypes -------------------------------------------------------------------

// Three steps per dtype on one handle; fp32 shows the sum before any rounding, fp16 the
// sum rounded once (large hidden, so some sums land on fp16 ties and subnormals).
TEST(NewOutputs, LowLatencyCombineOutInFp16AndFp32) {
  const Shape shape = world_shape(8, 2048, 32, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  const std::vector<ref::Problem> problems = ll_problems(shape, 8, 90000, 3);
  for (EpcDtype dtype : {EPC_DTYPE_FP32, EPC_DTYPE_FP16, EPC_DTYPE_BF16}) {
    ll::LlOutputs outputs;
    outputs.out_dtype = dtype;
    ll::run_sequence(group.get(), shape, problems, 90100, std::string("LL out ") + dtype_name(dtype), EPC_DTYPE_INT64,
                     0, 0, {}, outputs);
  }
  // The send-only halves write the same values.
  ll::LlOutputs fp32;
  fp32.out_dtype = EPC_DTYPE_FP32;
  ll::run_sequence(group.get(), shape, problems, 90200, "LL out fp32, send-only", EPC_DTYPE_INT64, EPC_STEP_SEND_ONLY,
                   EPC_STEP_SEND_ONLY, {}, fp32);
}

TEST(NewOutputs, HighThroughputCombineOutInFp16AndFp32) {
  const ht::HtShape shape = world_shape(16, 2048, 256, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  const std::vector<ht::HtStep> steps = ht::make_steps(shape, ht::random_spec(8, 91000), 2, my_rank());
  for (EpcDtype dtype : {EPC_DTYPE_FP32, EPC_DTYPE_FP16}) {
    ht::CallOptions o;
    o.out_dtype = dtype;
    ht::CallOptions plain = ht::payload_only();
    plain.out_dtype = dtype;
    const std::string label = std::string("HT out ") + dtype_name(dtype);
    ht::run_steps(group.get(), shape, steps, EPC_SIZING_EXACT, {o, plain}, label);
    ht::run_steps(group.get(), shape, steps, EPC_SIZING_CAPACITY, {plain, o}, label);
  }
}

// ---- Global expert ids -----------------------------------------------------------------------

// HT: out_topk_idx of a handle with EPC_HANDLE_GLOBAL_EXPERT_IDS holds rank * L + local id
// (masked and other ranks' entries -1); both sizings, with fully masked tokens and an
// empty rank.
TEST(NewOutputs, HighThroughputGlobalExpertIds) {
  const ht::HtShape shape = world_shape(8, 1024, 128, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  ht::ProblemSpec spec = ht::random_spec(8, 92000);
  spec.empty_rank = 0;
  std::vector<ht::HtStep> steps;
  for (uint64_t s = 0; s < 2; ++s) {
    spec.seed = 92000 + 100 * s;
    steps.push_back(ht::make_step(ht::make_problem(shape, spec), spec.seed + 1, my_rank(), false, 0,
                                  /*global_ids=*/true));
  }
  for (EpcSizing sizing : {EPC_SIZING_EXACT, EPC_SIZING_CAPACITY}) {
    ht::run_steps(group.get(), shape, steps, sizing, {ht::CallOptions{}}, "global expert ids", EPC_DTYPE_INT64,
                  EPC_HANDLE_GLOBAL_EXPERT_IDS);
  }
  // The same routing on a handle without the flag gives local ids again.
  std::vector<ht::HtStep> local;
  local.push_back(ht::make_step(steps[0].problem, 92001, my_rank()));
  ht::run_steps(group.get(), shape, local, EPC_SIZING_CAPACITY, {ht::CallOptions{}}, "local expert ids");
}

// LL has no out_topk_idx: the flag is accepted and the step is exact as without it.
TEST(NewOutputs, LowLatencyAcceptsGlobalExpertIds) {
  const Shape shape = world_shape(8, 1024, 32, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  ll::LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, 8));
  const ll::LlStep step = ll::make_step(ll::random_problem(shape, 8, 92500, true, 0.1), 92501, my_rank());
  ASSERT_TRUE(buffers.upload(step, stream.get()));
  const EpcTensor idx = buffers.topk_idx();
  HandlePtr handle;
  ASSERT_TRUE(create_handle_with(group.get(), handle_config(EPC_SIZING_CAPACITY, EPC_HANDLE_GLOBAL_EXPERT_IDS), &idx,
                                 stream.get(), handle, "epc_handle_create(LL, GLOBAL_EXPERT_IDS)"));
  EpcHandleInfo info{};
  ASSERT_TRUE(query_handle(handle.get(), info));
  EXPECT_EQ(info.flags, EPC_HANDLE_GLOBAL_EXPERT_IDS);
  ASSERT_TRUE(ll::dispatch_and_combine(handle.get(), buffers, stream.get()));
  buffers.check(step, stream.get(), "LL with EPC_HANDLE_GLOBAL_EXPERT_IDS");
}

// ---- Accumulated and host counts -------------------------------------------------------------

// Five steps with new routing (and new B) on one handle: after every step acc_expert_counts
// is the sum of the counts of the steps so far, and the pinned host copy equals that
// step's device counts. Then the same with send-only dispatches, whose host copy
// epc_complete queues.
TEST(NewOutputs, LowLatencyAccumulatedAndHostCounts) {
  const Shape shape = world_shape(8, 1024, 32, 6);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  const std::vector<ref::Problem> problems = ll_problems(shape, 6, 93000, 5);
  ll::LlOutputs outputs;
  outputs.counts_host = true;
  outputs.acc_counts = true;
  ll::run_sequence(group.get(), shape, problems, 93100, "LL acc and host counts", EPC_DTYPE_INT64, 0, 0, {}, outputs);
  ll::run_sequence(group.get(), shape, problems, 93200, "LL acc and host counts, send-only dispatch", EPC_DTYPE_INT32,
                   EPC_STEP_SEND_ONLY, 0, {}, outputs);
  ref::LlDispatchOptions fp8;
  fp8.use_fp8 = true;
  ll::run_sequence(group.get(), shape, ll_problems(shape, 6, 93300, 3), 93400, "LL acc and host counts, fp8",
                   EPC_DTYPE_INT64, EPC_STEP_SEND_ONLY, EPC_STEP_SEND_ONLY, fp8, outputs);
}

// HT: EXACT handles (a new one per step) and one CAPACITY handle (updated); the
// accumulator lives in the caller's buffer, so it sums over every handle that wrote it.
// Steps alternate between naming the accumulator and not: only the named ones add.
TEST(NewOutputs, HighThroughputAccumulatedAndHostCounts) {
  const ht::HtShape shape = world_shape(8, 1024, 128, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  ht::ProblemSpec spec = ht::random_spec(8, 94000);
  spec.hot_expert_share = 0.3;
  spec.duplicates = true;
  const std::vector<ht::HtStep> steps = ht::make_steps(shape, spec, 4, my_rank());
  ht::CallOptions both;
  both.counts_host = true;
  both.acc_counts = true;
  ht::CallOptions host_only;
  host_only.counts_host = true;
  for (EpcSizing sizing : {EPC_SIZING_EXACT, EPC_SIZING_CAPACITY}) {
    ht::run_steps(group.get(), shape, steps, sizing, {both, host_only, both}, "HT acc and host counts");
  }
}

}  // namespace
}  // namespace epc::gputest
