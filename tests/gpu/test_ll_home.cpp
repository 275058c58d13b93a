// SPDX-License-Identifier: Apache-2.0
// Low-latency combine with weights at combine time (EPC_WEIGHTING_HOME) on EXPERT_PADDED
// handles of groups with EPC_GROUP_COMBINE_PER_ENTRY, bit for bit against the reference model's
// ll_combine_home: every entry's row returns unweighted and the token's rank sums
// home_topk_weights[t][k] x row in fp32 in top-k order. bf16 and fp8 dispatch, bf16 and fp32
// out, fused and send-only + epc_complete, a CUDA graph replay; routing with B < T on some
// ranks, masked entries and duplicate expert ids. On the same group the default SENDER combine
// still matches its reference (ll_case.hpp's check), and a group without the flag refuses HOME
// with nothing written. A dispatch without topk_weights (weights given at combine only) serves
// HOME, and the SENDER combine after it is refused naming the weighting, with nothing written.
// Across virtual nodes (every peer through the network transport) the same, over several steps
// on one handle.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/reference/problem_gen.hpp"
#include "tests/reference/reference.hpp"

namespace epc::gputest::ll {
namespace {

struct HomeRun {
  bool fp8 = false;
  EpcDtype out_dtype = EPC_DTYPE_BF16;
  StepFlags flags = 0;           // EPC_STEP_SEND_ONLY for both steps
  bool graph = false;            // capture dispatch + combine once, replay twice
  bool dispatch_weights = true;  // false: dispatch without topk_weights (weights at combine only)
};

std::string label_of(const HomeRun& r) {
  return std::string("LL home") + (r.fp8 ? " fp8" : " bf16") + " out " + dtype_name(r.out_dtype) +
         (r.flags & EPC_STEP_SEND_ONLY ? " send-only" : " fused") + (r.graph ? " graph" : "") +
         (r.dispatch_weights ? "" : " no dispatch weights");
}

// Home weights of every rank, [B_r * K]: multiples of 1/16 in [-2, 2), drawn from `seed`, the
// same on every rank; masked entries get weights too, which must play no part.
std::vector<std::vector<float>> home_weights(const ref::Problem& p, uint64_t seed) {
  std::vector<std::vector<float>> home(p.nranks);
  uint64_t h = seed;
  for (int r = 0; r < p.nranks; ++r) {
    for (int i = 0; i < p.ranks[r].num_tokens * p.topk; ++i) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      home[r].push_back(static_cast<float>(static_cast<int>((h >> 33) % 64) - 32) / 16.0f);
    }
  }
  return home;
}

// The reference's out for this rank in `dtype`, as bytes: bf16 (one rounding) or fp32 (the sums).
std::vector<uint8_t> want_bytes(const std::vector<float>& sums, EpcDtype dtype) {
  std::vector<uint8_t> bytes;
  if (dtype == EPC_DTYPE_FP32) {
    bytes.resize(sums.size() * 4);
    std::memcpy(bytes.data(), sums.data(), bytes.size());
  } else {
    const std::vector<uint16_t> rounded = ref::round_sums(sums, ref::Dtype::kBf16);
    bytes.resize(rounded.size() * 2);
    std::memcpy(bytes.data(), rounded.data(), bytes.size());
  }
  return bytes;
}

int first_mismatch(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, int element) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) return static_cast<int>(i) / element;
  }
  return -1;
}

// A HOME combine's arguments: the handle's expert outputs `x`, `out`, the home weights [B, K].
EpcCombineArgs home_combine_args(const EpcTensor* x, const EpcTensor* out, const EpcTensor* weights,
                                 uint32_t flags = 0) {
  EpcCombineArgs args = EPC_COMBINE_ARGS_INIT;
  args.flags = flags;
  args.weighting = EPC_WEIGHTING_HOME;
  args.home_topk_weights = weights;
  args.x = x;
  args.out = out;
  return args;
}

void run_home(EpcGroup* group, const LlShape& shape, const ref::Problem& problem, const HomeRun& run, uint64_t seed) {
  const std::string label = label_of(run);
  const int me = my_rank(), K = problem.topk, H = shape.hidden;
  ref::LlDispatchOptions options;
  options.use_fp8 = run.fp8;
  const LlStep step = make_step(problem, seed, me, options);
  const std::vector<std::vector<float>> home = home_weights(problem, seed + 7);
  const std::vector<float> sums = ref::ll_combine_home_sums(problem, make_expert_outputs(problem, seed), home)[me];
  const std::vector<uint8_t> want = want_bytes(sums, run.out_dtype);
  const int element = run.out_dtype == EPC_DTYPE_FP32 ? 4 : 2;

  Stream stream;
  ASSERT_TRUE(stream.status());
  LlBuffers buffers;
  LlOutputs outputs;
  outputs.out_dtype = run.out_dtype;
  outputs.dispatch_weights = run.dispatch_weights;
  ASSERT_TRUE(buffers.allocate(shape, K, EPC_DTYPE_INT64, outputs));
  ASSERT_TRUE(buffers.upload(step, stream.get()));
  DeviceMemory weights;
  ASSERT_TRUE(weights.allocate(std::max<std::size_t>(4, home[me].size() * 4), "home weights"));
  ASSERT_TRUE(upload_bytes(weights.get(), home[me].data(), home[me].size() * 4, stream.get(), "home weights"));
  HandlePtr handle;
  ASSERT_TRUE(create_handle(group, buffers, stream.get(), handle));

  // The default combine on this group first: dispatch and SENDER as the reference says (with
  // dispatch weights only: without, SENDER is refused below).
  if (run.dispatch_weights) {
    ASSERT_TRUE(dispatch_and_combine(handle.get(), buffers, stream.get(), run.flags, run.flags));
    EXPECT_TRUE(buffers.check(step, stream.get(), label + " (SENDER on the per-entry group)"));
  }

  const EpcTensor expert_out = buffers.expert_out(), out = buffers.out();
  const EpcTensor t_home = make_tensor(weights.get(), EPC_DTYPE_FP32, {step.tokens(), K});
  EpcCombineArgs args = home_combine_args(&expert_out, &out, &t_home, run.flags);
  auto home_step = [&]() -> ::testing::AssertionResult {
    const ::testing::AssertionResult d = dispatch(handle.get(), buffers, run.flags, stream.get());
    if (!d) return d;
    const ::testing::AssertionResult c =
        epc_ok(epc_combine(handle.get(), &args, stream.get()), label + ": epc_combine");
    if (!c || (run.flags & EPC_STEP_SEND_ONLY) == 0) return c;
    return epc_ok(epc_complete(handle.get(), 0, stream.get()), label + ": epc_complete (combine)");
  };
  auto check = [&](const std::string& what) {
    std::vector<uint8_t> got(want.size());
    ASSERT_TRUE(download_and_wait({{got.data(), out.data, got.size(), "out"}}, stream.get()));
    EXPECT_EQ(first_mismatch(got, want, element), -1)
        << label << " (" << what << "): first mismatching element of " << step.tokens() << " x " << H;
  };

  ASSERT_TRUE(cuda_ok(cudaMemsetAsync(out.data, 0xFF, want.size(), stream.get()), "poisoning out"));
  ASSERT_TRUE(home_step());
  check("eager");
  if (!run.dispatch_weights) {
    // A dispatch without weights leaves SENDER nothing to weight with: refused by name, and
    // nothing written (out keeps the HOME sums).
    EXPECT_EQ(call_combine(handle.get(), buffers, 0, stream.get()), EPC_ERR_INVALID_ARGUMENT) << label;
    char message[512];
    ASSERT_EQ(epc_last_error(message, sizeof message, nullptr), EPC_OK);
    EXPECT_NE(std::string(message).find("EpcCombineArgs.weighting"), std::string::npos) << message;
    check("after the refused SENDER combine");
    // After a new routing with no dispatch since, the call order is what is refused, whatever
    // the last dispatch carried (it said INVALID_ARGUMENT about weights before).
    ASSERT_TRUE(update_handle(handle.get(), buffers, stream.get()));
    EXPECT_EQ(call_combine(handle.get(), buffers, 0, stream.get()), EPC_ERR_INVALID_USAGE) << label;
    ASSERT_EQ(epc_last_error(message, sizeof message, nullptr), EPC_OK);
    EXPECT_NE(std::string(message).find("call epc_dispatch first"), std::string::npos) << message;
    check("after the refused combine without a dispatch");
  }
  if (!run.graph) return;
  GraphExecPtr exec;
  ASSERT_TRUE(capture_on_every_rank(stream.get(), home_step, exec));
  for (int replay = 1; replay <= 2; ++replay) {
    ASSERT_TRUE(cuda_ok(cudaMemsetAsync(out.data, 0xFF, want.size(), stream.get()), "poisoning out"));
    ASSERT_TRUE(cuda_ok(cudaGraphLaunch(exec.get(), stream.get()), "cudaGraphLaunch"));
    check("graph replay " + std::to_string(replay));
  }
}

ref::Problem home_problem(const LlShape& shape, int topk, uint64_t seed) {
  ref::ProblemGenOptions o = gen_options(shape, topk, seed);
  o.random_token_counts = true;
  o.masked_fraction = 0.25;
  o.allow_duplicate_experts = true;
  return ref::make_random_problem(o);
}

// hidden 1024 (fp8: eight scale blocks), T 24 with B drawn in [0, T], top-6 of 16 experts per
// rank with duplicates and masked entries.
TEST(LowLatencyHome, MatchesTheReference) {
  const LlShape shape = world_shape(16, 1024, 24, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group, EPC_DTYPE_BF16, EPC_GROUP_COMBINE_PER_ENTRY));
  uint64_t seed = 27000;
  for (bool fp8 : {false, true}) {
    for (EpcDtype out : {EPC_DTYPE_BF16, EPC_DTYPE_FP32}) {
      for (StepFlags flags : {0u, static_cast<uint32_t>(EPC_STEP_SEND_ONLY)}) {
        HomeRun run;
        run.fp8 = fp8;
        run.out_dtype = out;
        run.flags = flags;
        run_home(group.get(), shape, home_problem(shape, 6, seed), run, seed + 1);
        seed += 10;
      }
    }
  }
  // Weights at combine only, as vLLM passes them: dispatch without topk_weights, fused and
  // send-only, bf16 and fp8.
  for (bool fp8 : {false, true}) {
    HomeRun run;
    run.fp8 = fp8;
    run.flags = fp8 ? static_cast<uint32_t>(EPC_STEP_SEND_ONLY) : 0u;
    run.dispatch_weights = false;
    run_home(group.get(), shape, home_problem(shape, 6, seed), run, seed + 1);
    seed += 10;
  }
}

// The step captured once and replayed (top-8, the group's max_topk); a batch of every token
// with nothing masked; the hidden size of DeepSeek-V3 with its top-8.
TEST(LowLatencyHome, GraphReplayAndLargeRows) {
  const LlShape shape = world_shape(16, 1024, 24, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group, EPC_DTYPE_BF16, EPC_GROUP_COMBINE_PER_ENTRY));
  HomeRun run;
  run.graph = true;
  run_home(group.get(), shape, home_problem(shape, 8, 27500), run, 27501);
  run.graph = false;
  run_home(group.get(), shape, ref::make_random_problem(gen_options(shape, 8, 27600)), run, 27601);

  const LlShape wide = world_shape(32, 7168, 8, 8);
  GroupPtr wide_group;
  ASSERT_TRUE(create_group(wide, EPC_MODE_LOW_LATENCY, wide_group, EPC_DTYPE_BF16, EPC_GROUP_COMBINE_PER_ENTRY));
  run.out_dtype = EPC_DTYPE_FP32;
  run_home(wide_group.get(), wide, home_problem(wide, 8, 27700), run, 27701);
}

// ---- Across nodes --------------------------------------------------------------------------

// Messages (source rank, token, destination rank in another node) with two entries or more on
// their destination: their rows return to the token's rank through the network transport,
// written through one staged lookup and put per row or all at once.
int multi_entry_messages_across(const ref::Problem& p, int node_size) {
  int messages = 0;
  for (int rank = 0; rank < p.nranks; ++rank) {
    const ref::RankTokens& sent = p.ranks[rank];
    for (int t = 0; t < sent.num_tokens; ++t) {
      std::vector<int> entries(p.nranks, 0);
      for (int j = 0; j < p.topk; ++j) {
        const int64_t expert = sent.topk_idx[static_cast<std::size_t>(t) * p.topk + j];
        if (expert >= 0) ++entries[p.rank_of_expert(expert)];
      }
      for (int d = 0; d < p.nranks; ++d) messages += d / node_size != rank / node_size && entries[d] >= 2;
    }
  }
  return messages;
}

// One HOME step of a sequence: the routing, and how the step runs.
struct HomeStep {
  ref::Problem problem;
  HomeRun run;
};

// Runs `steps` one after another on ONE handle of `group` (created from the first routing,
// updated with each later one), each a dispatch and a HOME combine, and compares every out
// with the reference bit for bit. Before the first HOME step, a SENDER combine of the same
// dispatch must match its reference too. Step s draws its y from seed + 10 * s.
void run_home_sequence(EpcGroup* group, const LlShape& shape, const std::vector<HomeStep>& steps, uint64_t seed,
                       const std::string& label) {
  const int me = my_rank(), K = steps.front().problem.topk;
  Stream stream;
  ASSERT_TRUE(stream.status());
  LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  DeviceMemory weights;
  ASSERT_TRUE(weights.allocate(static_cast<std::size_t>(shape.max_tokens) * K * 4, "home weights"));
  HandlePtr handle;
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const ref::Problem& problem = steps[s].problem;
    const HomeRun& run = steps[s].run;
    ASSERT_EQ(problem.topk, K);
    const uint64_t y_seed = seed + 10 * s;
    const std::string where = label + ", step " + std::to_string(s) + " (" + label_of(run) + ")";
    ref::LlDispatchOptions options;
    options.use_fp8 = run.fp8;
    const LlStep step = make_step(problem, y_seed, me, options);
    const std::vector<std::vector<float>> home = home_weights(problem, y_seed + 7);
    const std::vector<float> sums = ref::ll_combine_home_sums(problem, make_expert_outputs(problem, y_seed), home)[me];
    const std::vector<uint8_t> want = want_bytes(sums, EPC_DTYPE_BF16);
    ASSERT_TRUE(buffers.upload(step, stream.get()));
    ASSERT_TRUE(upload_bytes(weights.get(), home[me].data(), home[me].size() * 4, stream.get(), "home weights"));
    if (s == 0) {
      ASSERT_TRUE(create_handle(group, buffers, stream.get(), handle));
      ASSERT_TRUE(dispatch_and_combine(handle.get(), buffers, stream.get(), run.flags, run.flags));
      EXPECT_TRUE(buffers.check(step, stream.get(), where + ", SENDER"));
    } else {
      ASSERT_TRUE(update_handle(handle.get(), buffers, stream.get()));
    }
    const EpcTensor expert_out = buffers.expert_out(), out = buffers.out();
    const EpcTensor t_home = make_tensor(weights.get(), EPC_DTYPE_FP32, {step.tokens(), K});
    EpcCombineArgs args = home_combine_args(&expert_out, &out, &t_home, run.flags);
    ASSERT_TRUE(cuda_ok(cudaMemsetAsync(out.data, 0xFF, want.size(), stream.get()), "poisoning out"));
    ASSERT_TRUE(dispatch(handle.get(), buffers, run.flags, stream.get()));
    ASSERT_TRUE(epc_ok(epc_combine(handle.get(), &args, stream.get()), where + ": epc_combine"));
    if ((run.flags & EPC_STEP_SEND_ONLY) != 0) {
      ASSERT_TRUE(epc_ok(epc_complete(handle.get(), 0, stream.get()), where + ": epc_complete (combine)"));
    }
    std::vector<uint8_t> got(want.size());
    ASSERT_TRUE(download_and_wait({{got.data(), out.data, got.size(), "out"}}, stream.get()));
    EXPECT_EQ(first_mismatch(got, want, 2), -1)
        << where << ": first mismatching element of " << step.tokens() << " x " << shape.hidden;
  }
}

// Virtual nodes (every peer of another node through the network transport's NVLink stand-in):
// at 2 ranks nodes of 1, at 4 nodes of 1 and 2. Five HOME steps on one handle, so both slots
// are reused: random B with masked and duplicate entries (fused, bf16; small batches split
// each message over several blocks: one put per row); every rank's whole batch (T = 48 on 2
// ranks or more: one block per message, one put per message; send-only, fp8 dispatch); a hot
// expert with rank 0 empty; the first routing again; a batch of one token per rank.
TEST(LowLatencyHome, AcrossVirtualNodes) {
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  const LlShape shape = world_shape(8, 1024, 48, 8);
  for (int node_size : sizes) {
    const std::string label = "LL home across virtual nodes of " + std::to_string(node_size);
    EpcGroupConfig config = group_config(shape, EPC_MODE_LOW_LATENCY);
    config.flags = EPC_GROUP_COMBINE_PER_ENTRY;
    config.virtual_node_size = static_cast<uint32_t>(node_size);
    EpcGroup* raw = nullptr;
    ASSERT_TRUE(epc_ok(epc_group_create(context().comm, &config, &raw), label + ": epc_group_create"));
    GroupPtr group(raw);
    const uint64_t seed = 28000 + 1000 * static_cast<uint64_t>(node_size);

    std::vector<HomeStep> steps;
    steps.push_back({home_problem(shape, 8, seed), HomeRun{}});
    HomeRun full_run;
    full_run.fp8 = true;
    full_run.flags = EPC_STEP_SEND_ONLY;
    steps.push_back({ref::make_random_problem(gen_options(shape, 8, seed + 1)), full_run});
    ref::ProblemGenOptions skewed = gen_options(shape, 8, seed + 2);
    skewed.hot_expert_share = 0.33;
    skewed.hot_expert = shape.num_experts - 1;
    skewed.masked_fraction = 0.1;
    // No duplicates here: a third of the entries on one expert, some named twice by a token,
    // would give it more than the R * T rows an expert zone holds (the other steps have them).
    skewed.allow_duplicate_experts = false;
    steps.push_back({ref::make_random_problem(skewed), HomeRun{}});
    ll::clear_rank(steps.back().problem, 0);
    steps.push_back({steps.front().problem, full_run});
    steps.back().run.fp8 = false;
    ref::ProblemGenOptions one = gen_options(shape, 8, seed + 4);
    one.allow_duplicate_experts = true;
    one.max_tokens = 1;  // B = 1 on every rank, in the group's T (the buffers' row layout)
    steps.push_back({ref::make_random_problem(one), HomeRun{}});
    steps.back().problem.max_tokens = shape.max_tokens;
    int across = 0;
    for (const HomeStep& step : steps) across += multi_entry_messages_across(step.problem, node_size);
    EXPECT_GT(across, 0) << label << ": no message with several entries crosses between nodes";
    run_home_sequence(group.get(), shape, steps, seed + 100, label);
  }
}

// A group without the flag has no per-entry rows: HOME is INVALID_ARGUMENT naming the flag, and
// out keeps its poison.
TEST(LowLatencyHome, GroupWithoutTheFlagRefusesHome) {
  const LlShape shape = world_shape(16, 1024, 24, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  const ref::Problem problem = home_problem(shape, 6, 27800);
  const LlStep step = make_step(problem, 27801, my_rank());
  Stream stream;
  ASSERT_TRUE(stream.status());
  LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, problem.topk));
  ASSERT_TRUE(buffers.upload(step, stream.get()));
  DeviceMemory weights;
  ASSERT_TRUE(weights.allocate(static_cast<std::size_t>(shape.max_tokens) * problem.topk * 4, "home weights"));
  HandlePtr handle;
  ASSERT_TRUE(create_handle(group.get(), buffers, stream.get(), handle));
  ASSERT_TRUE(dispatch(handle.get(), buffers, 0, stream.get()));
  const EpcTensor expert_out = buffers.expert_out(), out = buffers.out();
  const EpcTensor t_home = make_tensor(weights.get(), EPC_DTYPE_FP32, {step.tokens(), problem.topk});
  const std::size_t out_bytes = static_cast<std::size_t>(step.tokens()) * shape.hidden * 2;
  ASSERT_TRUE(cuda_ok(cudaMemsetAsync(out.data, 0xFF, out_bytes, stream.get()), "poisoning out"));
  EpcCombineArgs args = home_combine_args(&expert_out, &out, &t_home);
  EXPECT_EQ(epc_combine(handle.get(), &args, stream.get()), EPC_ERR_INVALID_ARGUMENT);
  const std::string message = last_error();
  EXPECT_NE(message.find("EPC_GROUP_COMBINE_PER_ENTRY"), std::string::npos) << message;
  std::vector<uint8_t> got(out_bytes);
  ASSERT_TRUE(download_and_wait({{got.data(), out.data, got.size(), "out"}}, stream.get()));
  EXPECT_EQ(got, std::vector<uint8_t>(out_bytes, 0xFF));
  // The handle is still usable: the default combine runs and matches.
  ASSERT_TRUE(combine(handle.get(), buffers, 0, stream.get()));
  EXPECT_TRUE(buffers.check(step, stream.get(), "LL SENDER after a refused HOME"));
}

}  // namespace
}  // namespace epc::gputest::ll
