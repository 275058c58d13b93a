// SPDX-License-Identifier: Apache-2.0
// High-throughput dispatch and combine on real GPUs, compared bit for bit with the CPU
// reference model (ref::ht_dispatch, ref::ht_combine, with backward weights).
//
// Every rank builds the same Problems from the same seeds and the same combine inputs for
// every rank, runs the reference for all ranks, uploads only its own part and checks only its
// own results (ht_case.hpp). Every rank runs exactly the same sequence of collective calls;
// data mismatches are reported (one line per kind and step) without leaving a test early.
// Each test makes its own group on the process's communicator; E = (experts per rank) * R.
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/reference/reference.hpp"

namespace epc::gputest::ht {
namespace {

// Every optional tensor passed; combine with or without backward weights.
CallOptions all_outputs(bool backward_weights) {
  CallOptions o;
  o.backward_weights = backward_weights;
  return o;
}

// ---- 1. Routing: random, skewed, masked, empty ranks; hidden 2048/2880/7168; top-k 1/8/16 --

struct RoutingCase {
  std::string name;
  int experts_per_rank = 0;  // L
  int hidden = 0;
  int max_tokens = 0;  // T, the group's
  int max_topk = 0;    // the group's; the problem's K is spec.topk
  ProblemSpec spec;
  bool empty_last_rank = false;  // B = 0 on the last rank (spec.empty_rank names another)
  EpcDtype idx_dtype = EPC_DTYPE_INT64;
  int problems = 2;  // steps per sizing, each with new routing (seeds spec.seed + 100 s)
};

// GoogleTest prints a case by its name (instead of its bytes).
void PrintTo(const RoutingCase& c, std::ostream* os) { *os << c.name; }

std::vector<RoutingCase> routing_cases() {
  std::vector<RoutingCase> cases;
  auto add = [&](const char* name, int experts_per_rank, int hidden, int max_tokens, int max_topk,
                 const ProblemSpec& spec) -> RoutingCase& {
    RoutingCase c;
    c.name = name;
    c.experts_per_rank = experts_per_rank;
    c.hidden = hidden;
    c.max_tokens = max_tokens;
    c.max_topk = max_topk;
    c.spec = spec;
    cases.push_back(c);
    return cases.back();
  };
  ProblemSpec spec = random_spec(8, 10000);
  spec.empty_rank = 1;
  add("RandomH2048TopK8", 16, 2048, 512, 8, spec);

  spec = random_spec(16, 11000);
  spec.random_token_counts = false;  // B = T
  spec.hot_expert_share = 0.5;
  spec.hot_expert = 5;
  spec.masked_fraction = 0.05;
  spec.empty_rank = 0;
  add("SkewedH2880TopK16Int32Routing", 16, 2880, 256, 16, spec).idx_dtype = EPC_DTYPE_INT32;

  // K = 1, below the group's max_topk of 8.
  add("RandomH7168TopK1", 64, 7168, 300, 8, random_spec(1, 12000)).empty_last_rank = true;

  spec = random_spec(8, 13000);
  spec.hot_expert_share = 0.3;
  spec.hot_expert = 3;
  spec.empty_rank = 2;
  add("SkewedH7168TopK8", 64, 7168, 600, 8, spec);

  // E = 4R < K on 2 and 3 ranks.
  spec = random_spec(16, 14000);
  spec.duplicates = true;
  add("DuplicateIdsH2048TopK16", 4, 2048, 200, 16, spec);

  // K = 1 and every token to expert 0: rank 0 receives every token, the others N = 0.
  spec = ProblemSpec{};
  spec.topk = 1;
  spec.seed = 15000;
  spec.hot_expert_share = 1.0;
  add("EveryTokenToExpert0TopK1", 16, 2048, 256, 8, spec).problems = 1;

  spec = ProblemSpec{};
  spec.topk = 8;
  spec.seed = 16000;
  spec.masked_fraction = 0.02;
  spec.fully_masked_token = true;
  add("Tokens4096H7168TopK8", 64, 7168, 4096, 8, spec).problems = 1;
  return cases;
}

class HighThroughputRouting : public ::testing::TestWithParam<RoutingCase> {};

// Each case: `problems` steps with new routing, first on EXACT handles (one per step; every
// optional output, combine without backward weights), then on one CAPACITY handle (created,
// then updated; every optional output, combine with backward weights).
TEST_P(HighThroughputRouting, MatchesTheReference) {
  const RoutingCase& c = GetParam();
  const HtShape shape = world_shape(c.experts_per_rank, c.hidden, c.max_tokens, c.max_topk);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  ProblemSpec spec = c.spec;
  if (c.empty_last_rank) spec.empty_rank = shape.nranks - 1;
  const std::vector<HtStep> steps = make_steps(shape, spec, c.problems, my_rank());
  run_steps(group.get(), shape, steps, EPC_SIZING_EXACT, {all_outputs(false)}, c.name, c.idx_dtype);
  run_steps(group.get(), shape, steps, EPC_SIZING_CAPACITY, {all_outputs(true)}, c.name, c.idx_dtype);
}

INSTANTIATE_TEST_SUITE_P(Cases, HighThroughputRouting, ::testing::ValuesIn(routing_cases()),
                         [](const ::testing::TestParamInfo<RoutingCase>& info) { return info.param.name; });

// ---- 2. FP8 payload -----------------------------------------------------------------------

// x in e4m3 bytes with caller-computed x_scales [B, H/128], copied unchanged: first the
// reference's quantization of x, then arbitrary bytes (NaN patterns included) and arbitrary
// finite scales on the same routing, then new routing. On a bf16 group (EXACT and CAPACITY)
// and on a group sized for fp8 rows (max_token_bytes H + H / 32, CAPACITY).
TEST(HighThroughput, Fp8PayloadIsCopiedUnchanged) {
  const HtShape shape = world_shape(16, 7168, 512, 8);
  ProblemSpec spec = random_spec(8, 20000);
  spec.empty_rank = 1;
  spec.fp8 = true;
  ref::Problem p = make_problem(shape, spec);
  std::vector<HtStep> steps;
  steps.push_back(make_step(p, 20001, my_rank(), /*fp8=*/true));
  replace_payload(p, 20002);
  steps.push_back(make_step(std::move(p), 20003, my_rank(), true));
  spec.seed = 20010;
  steps.push_back(make_step(make_problem(shape, spec), 20011, my_rank(), true));
  {
    GroupPtr group;
    ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
    run_steps(group.get(), shape, steps, EPC_SIZING_EXACT, {all_outputs(false)}, "fp8 on a bf16 group");
    run_steps(group.get(), shape, steps, EPC_SIZING_CAPACITY, {all_outputs(true)}, "fp8 on a bf16 group");
  }
  GroupPtr fp8_group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, fp8_group, EPC_DTYPE_FP8_E4M3));
  run_steps(fp8_group.get(), shape, steps, EPC_SIZING_CAPACITY, {all_outputs(true)}, "fp8 on an fp8 group");
}

// ---- 3. Optional tensors left out -----------------------------------------------------------

// topk_weights and out_topk_weights NULL, out_topk_idx / out_expert_counts / out_num_recv
// NULL, combine without backward weights; alternating with steps that pass weights but none
// of the other optional outputs (and combine with backward weights). Both sizings.
TEST(HighThroughput, OptionalTensorsMayBeNull) {
  const HtShape shape = world_shape(16, 2048, 256, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  ProblemSpec spec = random_spec(8, 21000);
  spec.empty_rank = 0;
  const std::vector<HtStep> steps = make_steps(shape, spec, 4, my_rank());
  CallOptions weights_only = payload_only();
  weights_only.topk_weights = true;
  weights_only.backward_weights = true;
  for (EpcSizing sizing : {EPC_SIZING_EXACT, EPC_SIZING_CAPACITY}) {
    run_steps(group.get(), shape, steps, sizing, {payload_only(), weights_only}, "optional tensors NULL");
  }
}

// ---- 4. Handle reuse ------------------------------------------------------------------------

// One handle, its cached layout reused by four dispatch+combine steps with new x and new
// combine rows each time (same routing): an EXACT and a CAPACITY handle.
TEST(HighThroughput, HandleReuseWithNewPayloads) {
  const HtShape shape = world_shape(16, 2048, 384, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  ref::Problem p = make_problem(shape, random_spec(8, 22000));
  std::vector<HtStep> steps;
  for (uint64_t s = 0; s < 4; ++s) {
    if (s > 0) replace_payload(p, 22100 + s);
    steps.push_back(make_step(p, 22200 + s, my_rank()));
  }
  for (EpcSizing sizing : {EPC_SIZING_EXACT, EPC_SIZING_CAPACITY}) {
    run_steps(group.get(), shape, steps, sizing, {all_outputs(sizing == EPC_SIZING_CAPACITY)}, "handle reuse");
  }
}

// ---- 5. Backward pass -----------------------------------------------------------------------

// Two training iterations (new routing each), every one on the forward pass's handle:
//   forward:  dispatch x (with weights, every output), combine the expert rows;
//   backward: the gradient of the combine is a dispatch of the output gradient [B, H] (no
//             weights, no optional outputs), compared with ht_dispatch of a Problem whose x
//             is that gradient; the gradient of the dispatch is a combine of the row
//             gradients [rows, H] with the gradient of out_topk_weights [rows, K]
//             (combine topk_weights), compared with ht_combine of those gradients.
// EXACT handles (one per iteration) and one CAPACITY handle (updated per iteration).
TEST(HighThroughput, BackwardPassOnTheForwardHandle) {
  const HtShape shape = world_shape(16, 2048, 512, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  ProblemSpec spec = random_spec(8, 0);
  spec.hot_expert_share = 0.2;
  spec.hot_expert = 1;
  spec.empty_rank = 1;
  std::vector<HtStep> steps;
  for (uint64_t it = 0; it < 2; ++it) {
    spec.seed = 23000 + 100 * it;
    ref::Problem p = make_problem(shape, spec);
    steps.push_back(make_step(p, spec.seed + 1, my_rank()));             // forward
    replace_payload(p, spec.seed + 2);                                   // x := output gradient
    steps.push_back(make_step(std::move(p), spec.seed + 3, my_rank()));  // backward
  }
  CallOptions forward = all_outputs(false);
  CallOptions backward = payload_only();
  backward.backward_weights = true;
  for (EpcSizing sizing : {EPC_SIZING_EXACT, EPC_SIZING_CAPACITY}) {
    run_steps(group.get(), shape, steps, sizing, {forward, backward}, "forward then backward");
  }
}

}  // namespace
}  // namespace epc::gputest::ht
