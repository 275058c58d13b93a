// SPDX-License-Identifier: Apache-2.0
// Low-latency dispatch and combine on real GPUs, compared bit for bit with the CPU reference
// model (ref::ll_dispatch, and ref::ll_combine with CombineOrder::kPerRankPrereduce).
//
// Every rank builds the same Problems from the same seeds and the same expert outputs y for
// every rank, runs the reference for all ranks, uploads only its own part and checks only its
// own results. Every rank runs exactly the same sequence of collective calls; data mismatches
// are reported (one line per kind and step) without leaving a test early, so later steps'
// collectives still line up. Each test makes its own group on the process's communicator.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/harness/scoped_env.hpp"
#include "tests/reference/problem_gen.hpp"
#include "tests/reference/reference.hpp"

namespace epc::gputest {
namespace {

using ll::LlBuffers;
using ll::LlShape;
using ll::LlStep;
using ll::run_sequence;

// Rotates every token's row of ids and weights by (rank + token) % K slots, so that the hot
// expert (drawn into slot 0 by the generator) moves through all slots.
void rotate_slots(ref::Problem& p) {
  const int K = p.topk;
  for (int r = 0; r < p.nranks; ++r) {
    ref::RankTokens& rank = p.ranks[r];
    for (int t = 0; t < rank.num_tokens; ++t) {
      const int shift = (r + t) % K;
      std::vector<int64_t> idx(K);
      std::vector<float> w(K);
      for (int k = 0; k < K; ++k) {
        idx[(k + shift) % K] = rank.topk_idx[static_cast<std::size_t>(t) * K + k];
        w[(k + shift) % K] = rank.topk_weights[static_cast<std::size_t>(t) * K + k];
      }
      for (int k = 0; k < K; ++k) {
        rank.topk_idx[static_cast<std::size_t>(t) * K + k] = idx[k];
        rank.topk_weights[static_cast<std::size_t>(t) * K + k] = w[k];
      }
    }
  }
}

// ---- 1. Random routing with masked entries ------------------------------------------------

// E = 16R, H = 2048, T = 64, K = 8, B_r uniform in [0, T], ~10% of entries masked; three
// steps on one handle.
TEST(LowLatency, RandomRoutingWithMaskedEntries) {
  const LlShape shape = world_shape(16, 2048, 64, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  std::vector<ref::Problem> problems;
  for (uint64_t s = 0; s < 3; ++s) {
    problems.push_back(ll::random_problem(shape, 8, 1000 + s, true, 0.1));
  }
  run_sequence(group.get(), shape, problems, 1100, "random routing");
}

// The same with int32 routing (topk_idx EPC_DTYPE_INT32), for create and update.
TEST(LowLatency, RoutingAsInt32) {
  const LlShape shape = world_shape(16, 2048, 64, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  std::vector<ref::Problem> problems;
  for (uint64_t s = 0; s < 2; ++s) {
    problems.push_back(ll::random_problem(shape, 8, 1200 + s, true, 0.1));
  }
  run_sequence(group.get(), shape, problems, 1300, "int32 routing", EPC_DTYPE_INT32);
}

// ---- 2. Every token to one expert -----------------------------------------------------------

// B = T on every rank, nothing masked. K = 1: every entry is expert 0, so expert 0 receives
// exactly R*T rows (its buffer is full) and every other expert none. K = 4 (no duplicate ids):
// every token has the hot expert in one slot (rotated through the slots) plus three others;
// first expert 0 (rank 0), then the last expert (on the last rank).
TEST(LowLatency, EveryTokenToOneExpert) {
  const LlShape shape = world_shape(8, 2048, 64, 4);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));

  ref::ProblemGenOptions one = gen_options(shape, 1, 2000);
  one.hot_expert_share = 1.0;
  one.hot_expert = 0;
  std::vector<ref::Problem> k1;
  k1.push_back(ref::make_random_problem(one));
  one.seed = 2001;
  k1.push_back(ref::make_random_problem(one));
  run_sequence(group.get(), shape, k1, 2100, "all to expert 0, K=1");

  std::vector<ref::Problem> k4;
  for (int hot : {0, shape.num_experts - 1}) {
    ref::ProblemGenOptions four = gen_options(shape, 4, 2010 + static_cast<uint64_t>(hot));
    four.hot_expert_share = 1.0;
    four.hot_expert = hot;
    ref::Problem p = ref::make_random_problem(four);
    rotate_slots(p);
    k4.push_back(std::move(p));
  }
  run_sequence(group.get(), shape, k4, 2200, "every token to one expert, K=4");
}

// Duplicate expert ids within one token's row: each entry is received (and weighted)
// separately. First every entry of every token is expert 0 (K = 4, B = T/4, so expert 0's
// buffer is exactly full); then random routing over few experts with duplicates allowed.
TEST(LowLatency, DuplicateExpertIdsInOneToken) {
  const LlShape shape = world_shape(4, 1024, 32, 4);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  std::vector<ref::Problem> problems;

  ref::ProblemGenOptions all_same = gen_options(shape, 4, 2300);
  all_same.max_tokens = shape.max_tokens / 4;
  all_same.allow_duplicate_experts = true;
  all_same.hot_expert_share = 1.0;
  problems.push_back(ref::make_random_problem(all_same));

  ref::ProblemGenOptions random = gen_options(shape, 4, 2301);
  random.max_tokens = shape.max_tokens / 2;
  random.random_token_counts = true;
  random.allow_duplicate_experts = true;
  random.masked_fraction = 0.1;
  problems.push_back(ref::make_random_problem(random));

  for (ref::Problem& p : problems) p.max_tokens = shape.max_tokens;  // the group's T
  run_sequence(group.get(), shape, problems, 2400, "duplicate expert ids");
}

// ---- 3. Ranks without tokens -----------------------------------------------------------------

// B = 0 on some ranks and B = T on the others, changing every step on one handle (created
// with B = 0 on rank 0): even ranks empty; odd ranks empty; every rank empty; only the last
// rank has tokens; every rank full.
TEST(LowLatency, RanksWithoutTokens) {
  const LlShape shape = world_shape(8, 2048, 64, 8);
  const int R = shape.nranks;
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  std::vector<ref::Problem> problems;
  for (uint64_t s = 0; s < 5; ++s) {
    ref::Problem p = ll::random_problem(shape, 8, 3000 + s, false, 0.1);
    for (int r = 0; r < R; ++r) {
      const bool empty = (s == 0 && r % 2 == 0) || (s == 1 && r % 2 == 1) || s == 2 || (s == 3 && r != R - 1);
      if (empty) ll::clear_rank(p, r);
    }
    problems.push_back(std::move(p));
  }
  run_sequence(group.get(), shape, problems, 3100, "ranks without tokens");
}

// ---- 4. Large hidden sizes, top-k 16 and 1 -----------------------------------------------

// E = 16R, T = 32, max_topk = 16: a K = 16 problem on one handle, then a K = 1 problem on a
// second handle of the same group (K below the group's max_topk). Random B, ~10% masked.
void run_hidden_case(int hidden, uint64_t seed) {
  const LlShape shape = world_shape(16, hidden, 32, 16);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  const std::string h = "H=" + std::to_string(hidden);
  run_sequence(group.get(), shape, {ll::random_problem(shape, 16, seed, true, 0.1)}, seed + 100, h + ", K=16");
  run_sequence(group.get(), shape, {ll::random_problem(shape, 1, seed + 1, true, 0.1)}, seed + 200, h + ", K=1");
}

TEST(LowLatency, Hidden2880TopK16AndTopK1) { run_hidden_case(2880, 4000); }

TEST(LowLatency, Hidden7168TopK16AndTopK1) { run_hidden_case(7168, 4500); }

// The largest shapes the issue names: B = T = 1024 tokens per rank (H = 2048, K = 8), and
// H = 16384 (T = 64, K = 8); random B with one rank at B = T, ~10% masked.
TEST(LowLatency, ThousandTokensPerRank) {
  const LlShape shape = world_shape(8, 2048, 1024, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  ref::Problem p = ll::random_problem(shape, 8, 4700, false, 0.1);
  run_sequence(group.get(), shape, {p}, 4710, "B=1024");
}

TEST(LowLatency, Hidden16384) {
  const LlShape shape = world_shape(8, 16384, 64, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  run_sequence(group.get(), shape, {ll::random_problem(shape, 8, 4800, true, 0.1)}, 4810, "H=16384");
}

// ---- 4b. FP8 dispatch -------------------------------------------------------------------------

// epc_dispatch with EPC_QUANT_FP8 against the reference's e4m3 cast: H = 7168, K = 8, random B, ~10%
// masked; two steps with plain scales, then two with power-of-two (UE8M0) scales and the
// dispatch send-only; combine (bf16) after each. Then top-k 16 with int32 routing.
TEST(LowLatency, Fp8DispatchMatchesTheReferenceCast) {
  const LlShape shape = world_shape(16, 7168, 64, 16);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  ref::LlDispatchOptions fp8;
  fp8.use_fp8 = true;
  std::vector<ref::Problem> problems;
  for (uint64_t s = 0; s < 2; ++s) problems.push_back(ll::random_problem(shape, 8, 4900 + s, true, 0.1));
  run_sequence(group.get(), shape, problems, 4910, "fp8", EPC_DTYPE_INT64, 0, 0, fp8);
  fp8.round_scale_ue8m0 = true;
  run_sequence(group.get(), shape, problems, 4920, "fp8 ue8m0", EPC_DTYPE_INT64, EPC_STEP_SEND_ONLY, 0, fp8);
  run_sequence(group.get(), shape, {ll::random_problem(shape, 16, 4930, true, 0.1)}, 4940, "fp8 K=16", EPC_DTYPE_INT32,
               0, 0, fp8);
}

// The e4m3 cast of rows holding NaN, infinities, signed zeros, subnormals and the largest bf16,
// against the reference: a block's amax skips NaN and takes an infinity (its scale is then
// infinite), a block of NaN only has the smallest scale. Every token of every rank gets the
// same special blocks, plain and UE8M0 scales, fused (a rank alone casts in its receiving
// part) and send-only (the sending part casts).
TEST(LowLatency, Fp8CastOfSpecialValues) {
  const LlShape shape = world_shape(16, 1024, 16, 16);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  ref::Problem problem = ll::random_problem(shape, 8, 4970, false, 0.1);
  constexpr uint16_t kNan = 0x7FC0, kNegNan = 0xFFC0, kInf = 0x7F80, kNegInf = 0xFF80, kNegZero = 0x8000,
                     kSubnormal = 0x0001, kNegSubnormal = 0x8003, kMax = 0x7F7F, kNegMax = 0xFF7F;
  for (ref::RankTokens& rank : problem.ranks) {
    for (int t = 0; t < rank.num_tokens; ++t) {
      uint16_t* row = rank.x.data() + static_cast<size_t>(t) * shape.hidden;
      row[3] = kNan;           // block 0: NaN beside random values
      row[128 + 5] = kInf;     // block 1: +inf
      row[256 + 7] = kNegInf;  // block 2: -inf and NaN
      row[256 + 100] = kNegNan;
      for (int c = 384; c < 512; ++c) row[c] = c % 2 != 0 ? kNegZero : 0;                // block 3: zeros
      for (int c = 512; c < 640; ++c) row[c] = c % 3 != 0 ? kNan : kNegNan;              // block 4: NaN only
      for (int c = 640; c < 768; ++c) row[c] = c % 2 != 0 ? kSubnormal : kNegSubnormal;  // block 5
      row[768] = kMax;  // block 6: the largest magnitudes
      row[768 + 127] = kNegMax;
      row[896 + 64] = kNan;  // block 7: NaN first in its lane's vector
      row[896 + 71] = kNegZero;
    }
  }
  ref::LlDispatchOptions fp8;
  fp8.use_fp8 = true;
  run_sequence(group.get(), shape, {problem}, 4980, "fp8 special values", EPC_DTYPE_INT64, 0, 0, fp8);
  run_sequence(group.get(), shape, {problem}, 4981, "fp8 special values (send-only)", EPC_DTYPE_INT64,
               EPC_STEP_SEND_ONLY, 0, fp8);
  fp8.round_scale_ue8m0 = true;
  run_sequence(group.get(), shape, {problem}, 4982, "fp8 ue8m0 special values", EPC_DTYPE_INT64, 0, 0, fp8);
  run_sequence(group.get(), shape, {problem}, 4983, "fp8 ue8m0 special values (send-only)", EPC_DTYPE_INT64,
               EPC_STEP_SEND_ONLY, 0, fp8);
}

// A group whose buffers hold fp8 rows only, with a hidden size whose fp8 row plus scales
// (640 + 20 bytes) is not a multiple of 16: every message must still start 16-byte aligned
// (found by the planner fuzz target; before the fix the receive kernel faulted).
TEST(LowLatency, Fp8GroupWithUnalignedRowBytes) {
  const LlShape shape = world_shape(8, 640, 32, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group, EPC_DTYPE_FP8_E4M3));
  ref::LlDispatchOptions fp8;
  fp8.use_fp8 = true;
  std::vector<ref::Problem> problems;
  for (uint64_t s = 0; s < 3; ++s) problems.push_back(ll::random_problem(shape, 8, 4950 + s, true, 0.1));
  run_sequence(group.get(), shape, problems, 4960, "fp8 group, hidden 640", EPC_DTYPE_INT64, 0, 0, fp8);
}

// ---- 5. Back to back ------------------------------------------------------------------------

// 1000 steps on one handle, new routing (epc_handle_update), new x, new y and a new B every
// step; checked after every step (the only host synchronisation).
TEST(LowLatency, ThousandStepsOnOneHandle) {
  constexpr int kSteps = 1000;
  const LlShape shape = world_shape(8, 256, 16, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  std::vector<ref::Problem> problems;
  for (uint64_t s = 0; s < kSteps; ++s) {
    problems.push_back(ll::random_problem(shape, 6, 5000 + s, true, 0.1));
  }
  run_sequence(group.get(), shape, problems, 15000, "1000 steps");
}

// 50 steps queued on one stream with no host synchronisation at all between them (each
// with its own input and output buffers, uploaded beforehand), then one wait and a check of
// every step: the double buffering must keep consecutive steps apart on its own.
TEST(LowLatency, FiftyStepsWithoutHostSynchronisation) {
  constexpr int kSteps = 50;
  constexpr int K = 6;
  const LlShape shape = world_shape(8, 1024, 32, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  std::vector<LlStep> steps;
  std::vector<LlBuffers> buffers(kSteps);
  for (int s = 0; s < kSteps; ++s) {
    steps.push_back(ll::make_step(ll::random_problem(shape, K, 5500 + s, true, 0.1), 5600 + s, my_rank()));
    ASSERT_TRUE(buffers[s].allocate(shape, K));
    ASSERT_TRUE(buffers[s].upload(steps[s], stream.get()));
  }
  ASSERT_TRUE(cuda_ok(cudaStreamSynchronize(stream.get()), "uploads"));

  HandlePtr handle;
  ASSERT_TRUE(ll::create_handle(group.get(), buffers[0], stream.get(), handle));
  for (int s = 0; s < kSteps; ++s) {
    if (s > 0) {
      ASSERT_TRUE(ll::update_handle(handle.get(), buffers[s], stream.get()));
    }
    ASSERT_TRUE(ll::dispatch_and_combine(handle.get(), buffers[s], stream.get()));
  }
  int failing_steps = 0;
  for (int s = 0; s < kSteps; ++s) {
    const std::string where =
        "unsynchronised step " + std::to_string(s) + " (B=" + std::to_string(steps[s].tokens()) + ")";
    if (!buffers[s].check(steps[s], stream.get(), where, failing_steps < kMaxReportedSteps)) {
      ++failing_steps;
    }
  }
  EXPECT_EQ(failing_steps, 0) << failing_steps << " of " << kSteps << " steps differ from the reference";
}

// ---- 6. Send-only ---------------------------------------------------------------------------

// Dispatch and combine queued with EPC_STEP_SEND_ONLY and finished by epc_complete, with
// unrelated work queued in between (as a caller overlapping compute would). Four steps on one
// handle: both halves send-only; only dispatch; only combine; both again.
TEST(LowLatency, SendOnlyThenComplete) {
  const int K = 8;
  const LlShape shape = world_shape(16, 2048, 64, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  DeviceMemory scratch;
  ASSERT_TRUE(scratch.allocate(8u << 20, "scratch"));
  HandlePtr handle;
  const bool send_only_dispatch[] = {true, true, false, true};
  const bool send_only_combine[] = {true, false, true, true};
  for (int s = 0; s < 4; ++s) {
    const LlStep step = ll::make_step(ll::random_problem(shape, K, 6000 + s, true, 0.1), 6100 + s, my_rank());
    ASSERT_TRUE(buffers.upload(step, stream.get()));
    if (s == 0) {
      ASSERT_TRUE(ll::create_handle(group.get(), buffers, stream.get(), handle));
    } else {
      ASSERT_TRUE(ll::update_handle(handle.get(), buffers, stream.get()));
    }
    if (send_only_dispatch[s]) {
      ASSERT_TRUE(epc_ok(ll::call_dispatch(handle.get(), buffers, EPC_STEP_SEND_ONLY, stream.get()),
                         "epc_dispatch(SEND_ONLY)"));
      ASSERT_TRUE(cuda_ok(cudaMemsetAsync(scratch.get(), s, scratch.bytes(), stream.get()), "overlapped work"));
      ASSERT_TRUE(epc_ok(epc_complete(handle.get(), 0, stream.get()), "epc_complete (dispatch)"));
    } else {
      ASSERT_TRUE(ll::dispatch(handle.get(), buffers, 0, stream.get()));
    }
    if (send_only_combine[s]) {
      ASSERT_TRUE(
          epc_ok(ll::call_combine(handle.get(), buffers, EPC_STEP_SEND_ONLY, stream.get()), "epc_combine(SEND_ONLY)"));
      ASSERT_TRUE(cuda_ok(cudaMemsetAsync(scratch.get(), s, scratch.bytes(), stream.get()), "overlapped work"));
      ASSERT_TRUE(epc_ok(epc_complete(handle.get(), 0, stream.get()), "epc_complete (combine)"));
    } else {
      ASSERT_TRUE(ll::combine(handle.get(), buffers, 0, stream.get()));
    }
    buffers.check(step, stream.get(),
                  std::string("send-only step ") + std::to_string(s) + " (dispatch " +
                      (send_only_dispatch[s] ? "send-only" : "plain") + ", combine " +
                      (send_only_combine[s] ? "send-only" : "plain") + ")");
  }
}

// ---- 6b. Line records --------------------------------------------------------------------

// Line records (kernels/device/line_words.cuh) with EPCOMM_LL_LINE_TOKENS 0 (every message and
// partial a record behind its sender's signal, as before them), 16 (a rank with at most 16 of
// its random 0..32 tokens takes its partials back as line records, the others as records: both
// in most steps) and 32 (a line group, T 32 of 2160-byte messages: every dispatch and combine
// moves as line records, kernels/wire/ll_message.hpp); dispatch and combine fused and
// send-only, bf16 and the fp8 cast with UE8M0 scales: the same bits as the reference either way.
// The ways of a step the line record tests run: fused and send-only halves, bf16 and the fp8
// cast with UE8M0 scales.
struct LineVariant {
  const char* name;
  ll::StepFlags dispatch_flags, combine_flags;
  bool fp8;

  ref::LlDispatchOptions options() const {
    ref::LlDispatchOptions o;
    o.use_fp8 = fp8;
    o.round_scale_ue8m0 = fp8;
    return o;
  }
};
constexpr auto kSendOnly = static_cast<ll::StepFlags>(EPC_STEP_SEND_ONLY);
constexpr LineVariant kLineVariants[] = {{"fused", 0, 0, false},
                                         {"send-only combine", 0, kSendOnly, false},
                                         {"send-only dispatch", kSendOnly, 0, false},
                                         {"fp8", 0, 0, true},
                                         {"fp8, send-only dispatch and combine", kSendOnly, kSendOnly, true}};

TEST(LowLatency, LineRecordsMatchTheReference) {
  const int K = 8;
  const LlShape shape = world_shape(16, 1024, 32, K);
  for (const char* lines : {"0", "16", "32"}) {
    SCOPED_TRACE(std::string("EPCOMM_LL_LINE_TOKENS=") + lines);
    GroupPtr group;
    {
      const test::ScopedEnv env("EPCOMM_LL_LINE_TOKENS", lines);
      ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
    }
    uint64_t seed = 6500;
    for (const LineVariant& v : kLineVariants) {
      seed += 2;
      const std::vector<ref::Problem> problems = {ll::random_problem(shape, K, seed, true, 0.1),
                                                  ll::random_problem(shape, K, seed + 1, true, 0.1)};
      run_sequence(group.get(), shape, problems, seed + 100, std::string("line records ") + lines + ", " + v.name,
                   EPC_DTYPE_INT64, v.dispatch_flags, v.combine_flags, v.options());
    }
  }
}

// Steps bounded by EpcDispatchArgs.max_step_tokens (ABI 2.2) in a group that is no line group
// (T 32 of 2160-byte messages; its line steps have up to 16 tokens): steps whose every rank has
// at most 12 tokens move as line records, steps of 0..32 random tokens mostly as records, in
// turn on the same slots (a line step's signal carries another epoch than a records step's),
// in every LineVariant: the same bits as the reference either way.
TEST(LowLatency, StepBoundsMatchTheReference) {
  const int K = 8;
  const LlShape shape = world_shape(16, 1024, 32, K);
  const LlShape small = world_shape(16, 1024, 12, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  uint64_t seed = 6700;
  for (const LineVariant& v : kLineVariants) {
    seed += 8;
    std::vector<ref::Problem> problems;
    for (int s = 0; s < 5; ++s) {
      const bool line_step = s % 3 != 1;
      ref::Problem p = ll::random_problem(line_step ? small : shape, K, seed + s, true, 0.1);
      p.max_tokens = shape.max_tokens;  // the group's T; the tokens stay at most 12
      problems.push_back(std::move(p));
    }
    run_sequence(group.get(), shape, problems, seed + 100, std::string("step bounds, ") + v.name, EPC_DTYPE_INT64,
                 v.dispatch_flags, v.combine_flags, v.options(), {}, /*bound_steps=*/true);
  }
}

// ---- 7. Two handles of one group --------------------------------------------------------------

// Handles A (K = 4, B = T) and B (K = 2, random B) of one group, used alternately for 10
// steps: each pair queues a full step on A then a full step on B with no host
// synchronisation, then checks both. Each handle gets new routing (epc_handle_update) every
// time it is used after its creation.
TEST(LowLatency, TwoHandlesUsedAlternately) {
  const LlShape shape = world_shape(8, 2048, 32, 4);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const int topk[2] = {4, 2};
  LlBuffers buffers[2];
  HandlePtr handles[2];
  for (int h = 0; h < 2; ++h) {
    ASSERT_TRUE(buffers[h].allocate(shape, topk[h]));
  }
  int failing_steps = 0;
  for (int pair = 0; pair < 5; ++pair) {
    std::vector<LlStep> steps;
    for (int h = 0; h < 2; ++h) {
      const int s = 2 * pair + h;
      steps.push_back(ll::make_step(ll::random_problem(shape, topk[h], 7000 + s, /*random_token_counts=*/h == 1, 0.1),
                                    7100 + s, my_rank()));
    }
    for (int h = 0; h < 2; ++h) {
      ASSERT_TRUE(buffers[h].upload(steps[h], stream.get()));
      if (pair == 0) {
        ASSERT_TRUE(ll::create_handle(group.get(), buffers[h], stream.get(), handles[h]));
      } else {
        ASSERT_TRUE(ll::update_handle(handles[h].get(), buffers[h], stream.get()));
      }
      ASSERT_TRUE(ll::dispatch_and_combine(handles[h].get(), buffers[h], stream.get()));
    }
    for (int h = 0; h < 2; ++h) {
      const std::string where = std::string("handle ") + (h == 0 ? "A" : "B") + ", step " +
                                std::to_string(2 * pair + h) + " (B=" + std::to_string(steps[h].tokens()) + ")";
      if (!buffers[h].check(steps[h], stream.get(), where, failing_steps < kMaxReportedSteps)) {
        ++failing_steps;
      }
    }
  }
  EXPECT_EQ(failing_steps, 0) << failing_steps << " of 10 steps differ from the reference";
  handles[1].reset();
  handles[0].reset();
}

// ---- 8. CUDA graph --------------------------------------------------------------------------

// One eager warm-up step; then a capture (global mode) of [epc_handle_update from the fixed
// routing buffer, epc_dispatch, epc_combine] on fixed buffers; three replays, each
// after writing NEW routing, x, weights and expert outputs y into those buffers (same B = T,
// the shapes are part of the graph); then one more eager step on the same handle.
TEST(LowLatency, CudaGraphReplaysWithNewRouting) {
  const int K = 8;
  const LlShape shape = world_shape(16, 2048, 32, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  auto step_for = [&](int s) {
    return ll::make_step(ll::random_problem(shape, K, 8000 + s, /*random_token_counts=*/false, 0.1), 8100 + s,
                         my_rank());
  };

  HandlePtr handle;
  {
    const LlStep warmup = step_for(0);
    ASSERT_TRUE(buffers.upload(warmup, stream.get()));
    ASSERT_TRUE(ll::create_handle(group.get(), buffers, stream.get(), handle));
    ASSERT_TRUE(ll::dispatch_and_combine(handle.get(), buffers, stream.get()));
    buffers.check(warmup, stream.get(), "eager warm-up before capture");
  }

  // Replays are collective: either every rank replays or none does.
  GraphExecPtr exec;
  ASSERT_TRUE(capture_on_every_rank(
      stream.get(),
      [&] {
        ::testing::AssertionResult r = ll::update_handle(handle.get(), buffers, stream.get());
        if (r) r = ll::dispatch_and_combine(handle.get(), buffers, stream.get());
        return r;
      },
      exec));

  for (int s = 1; s <= 3; ++s) {
    const LlStep step = step_for(s);
    ASSERT_TRUE(buffers.upload(step, stream.get()));
    ASSERT_TRUE(cuda_ok(cudaGraphLaunch(exec.get(), stream.get()), "cudaGraphLaunch"));
    buffers.check(step, stream.get(), "graph replay " + std::to_string(s));
  }

  const LlStep after = step_for(4);
  ASSERT_TRUE(buffers.upload(after, stream.get()));
  ASSERT_TRUE(ll::update_handle(handle.get(), buffers, stream.get()));
  ASSERT_TRUE(ll::dispatch_and_combine(handle.get(), buffers, stream.get()));
  buffers.check(after, stream.get(), "eager step after the graph replays");
}

}  // namespace
}  // namespace epc::gputest
