// SPDX-License-Identifier: Apache-2.0
// Virtual nodes (EpcGroupConfig.virtual_node_size): the NVLink domain split into nodes whose
// ranks reach each other only through the network transport (staged, put on commit,
// signalled behind the puts). Low-latency and high-throughput steps must give exactly the
// reference model's outputs, as they do without virtual nodes, for every node size that
// makes at least two nodes: on 4 ranks 2 nodes of 2 and 4 nodes of 1, on 2 and 3 ranks
// nodes of 1.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/harness/scoped_env.hpp"
#include "tests/reference/reference.hpp"

namespace epc::gputest {
namespace {

std::string nodes_label(int node_size) {
  const int world = context().env.world_size;
  return std::to_string(world / node_size) + " nodes of " + std::to_string(node_size);
}

// A group of `mode` split into nodes of `node_size` ranks; checks that the group reports
// the split (EpcGroupInfo.node / num_nodes), which `info_out` (if given) receives.
::testing::AssertionResult create_split_group(const Shape& shape, EpcMode mode, int node_size, GroupPtr& out,
                                              EpcDtype dtype = EPC_DTYPE_BF16, EpcGroupInfo* info_out = nullptr) {
  EpcGroupConfig config = group_config(shape, mode, dtype);
  config.virtual_node_size = static_cast<uint32_t>(node_size);
  EpcGroup* raw = nullptr;
  ::testing::AssertionResult created =
      epc_ok(epc_group_create(context().comm, &config, &raw), "epc_group_create with virtual nodes");
  if (!created) return created;
  out.reset(raw);
  EpcGroupInfo info;
  info.struct_size = sizeof info;
  info.abi_version = EPC_ABI_VERSION;
  ::testing::AssertionResult queried = epc_ok(epc_group_query(raw, &info), "epc_group_query");
  if (!queried) return queried;
  const int world = context().env.world_size;
  if (info.num_nodes != world / node_size || info.node != my_rank() / node_size) {
    return ::testing::AssertionFailure() << "group reports node " << info.node << " of " << info.num_nodes << " for "
                                         << nodes_label(node_size);
  }
  if (info_out != nullptr) *info_out = info;
  return ::testing::AssertionSuccess();
}

// An HT create_split_group with EPCOMM_HT_PART_TOKENS set to `part_tokens` while the group is
// created, which is when it is read (core/ht/ht_parts.hpp; "0": whole steps).
::testing::AssertionResult create_group_in_parts(const char* part_tokens, const Shape& shape, int node_size,
                                                 GroupPtr& out, EpcDtype dtype = EPC_DTYPE_BF16,
                                                 EpcGroupInfo* info_out = nullptr) {
  const test::ScopedEnv parts("EPCOMM_HT_PART_TOKENS", part_tokens);
  return create_split_group(shape, EPC_MODE_HIGH_THROUGHPUT, node_size, out, dtype, info_out);
}

// Tokens (of any rank) with entries on ranks of their rank's own node and on `remote` or
// more ranks of other nodes. A low-latency payload is staged once and put to every rank of
// another node that hosts an entry (kernels/wire/staging_map.hpp), and stored directly into
// the ranks of its own node: the routing must have tokens that go both ways, and (with two
// ranks or more outside a node) to two ranks of other nodes, for the case to cover that.
int tokens_sent_across(const ref::Problem& p, int node_size, int remote, bool and_in_node) {
  int tokens = 0;
  for (int rank = 0; rank < p.nranks; ++rank) {
    const ref::RankTokens& sent = p.ranks[rank];
    for (int t = 0; t < sent.num_tokens; ++t) {
      std::vector<bool> hosts(p.nranks, false);
      for (int j = 0; j < p.topk; ++j) {
        const int64_t expert = sent.topk_idx[static_cast<size_t>(t) * p.topk + j];
        if (expert >= 0) hosts[p.rank_of_expert(expert)] = true;
      }
      int across = 0;
      bool in_node = false;
      for (int r = 0; r < p.nranks; ++r) {
        if (!hosts[r]) continue;
        if (r / node_size == rank / node_size) {
          in_node = true;
        } else {
          ++across;
        }
      }
      if (across >= remote && (in_node || !and_in_node)) ++tokens;
    }
  }
  return tokens;
}

// LL: random routing with masked entries and random B, then skewed routing (a hot expert
// on the last rank takes a third of the entries) with one rank empty; fp8 dispatch too.
TEST(VirtualNodes, LowLatencyMatchesTheReference) {
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  const ll::LlShape shape = world_shape(8, 2048, 48, 8);
  for (int node_size : sizes) {
    GroupPtr group;
    ASSERT_TRUE(create_split_group(shape, EPC_MODE_LOW_LATENCY, node_size, group));
    std::vector<ref::Problem> problems;
    problems.push_back(ll::random_problem(shape, 8, 41000 + node_size, true, 0.1));
    ref::ProblemGenOptions skewed = gen_options(shape, 8, 42000 + node_size);
    skewed.hot_expert_share = 0.33;
    skewed.hot_expert = shape.num_experts - 1;
    skewed.masked_fraction = 0.05;
    problems.push_back(ref::make_random_problem(skewed));
    ll::clear_rank(problems.back(), 0);
    problems.push_back(problems.front());  // the first routing again, in the other slot
    const std::string label = "low latency, " + nodes_label(node_size);
    EXPECT_GT(tokens_sent_across(problems[0], node_size, 1, /*and_in_node=*/true), 0) << label;
    if (context().env.world_size - node_size >= 2) {
      EXPECT_GT(tokens_sent_across(problems[0], node_size, 2, /*and_in_node=*/false), 0) << label;
    }
    ll::run_sequence(group.get(), shape, problems, 43000, label);

    ref::LlDispatchOptions fp8;
    fp8.use_fp8 = true;
    ll::run_sequence(group.get(), shape, {problems[0], problems[1]}, 44000, label + ", fp8", EPC_DTYPE_INT64, 0, 0,
                     fp8);
  }
}

// HT: skewed routing with masked entries (and a fully masked token, an empty rank), on
// EXACT and CAPACITY handles, forward then the backward pass of both operations.
TEST(VirtualNodes, HighThroughputMatchesTheReferenceWithBackwardPass) {
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  const ht::HtShape shape = world_shape(16, 2048, 256, 8);
  for (int node_size : sizes) {
    GroupPtr group;
    ASSERT_TRUE(create_split_group(shape, EPC_MODE_HIGH_THROUGHPUT, node_size, group));
    ht::ProblemSpec spec = ht::random_spec(8, 0);
    spec.hot_expert_share = 0.3;
    spec.hot_expert = 2;
    spec.empty_rank = context().env.world_size - 1;
    std::vector<ht::HtStep> steps;
    for (uint64_t it = 0; it < 2; ++it) {
      spec.seed = 45000 + 100 * it + node_size;
      ref::Problem p = ht::make_problem(shape, spec);
      steps.push_back(ht::make_step(p, spec.seed + 1, my_rank(), false, node_size));             // forward
      ht::replace_payload(p, spec.seed + 2);                                                     // x := output gradient
      steps.push_back(ht::make_step(std::move(p), spec.seed + 3, my_rank(), false, node_size));  // backward
    }
    ht::CallOptions forward;
    ht::CallOptions backward = ht::payload_only();
    backward.backward_weights = true;
    const std::string label = "high throughput, " + nodes_label(node_size);
    for (EpcSizing sizing : {EPC_SIZING_EXACT, EPC_SIZING_CAPACITY}) {
      ht::run_steps(group.get(), shape, steps, sizing, {forward, backward}, label);
    }
  }
}

// HT fp8 payloads (e4m3 bytes and scales, NaN patterns included) on an fp8 group: the rail
// slots and the forwarders carry the scales too; in whole steps, and in parts of 40 tokens
// on T = 128 (EPCOMM_HT_PART_TOKENS: four parts, the last of 8), where each part reads its
// tokens' scales from x_scales at its own offset. A group in parts holds a smaller window.
TEST(VirtualNodes, HighThroughputFp8PayloadIsCopiedUnchanged) {
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  const ht::HtShape shape = world_shape(16, 2048, 128, 8);
  std::vector<uint64_t> whole_window(sizes.size(), 0);
  for (const char* part_tokens : {"0", "40"}) {
    const bool in_parts = std::string(part_tokens) != "0";
    for (size_t n = 0; n < sizes.size(); ++n) {
      const int node_size = sizes[n];
      GroupPtr group;
      EpcGroupInfo info;
      ASSERT_TRUE(create_group_in_parts(part_tokens, shape, node_size, group, EPC_DTYPE_FP8_E4M3, &info));
      if (in_parts) {
        EXPECT_LT(info.symmetric_bytes, whole_window[n]) << nodes_label(node_size);
      } else {
        whole_window[n] = info.symmetric_bytes;
      }
      ht::ProblemSpec spec = ht::random_spec(8, 46000 + node_size);
      spec.fp8 = true;
      ref::Problem p = ht::make_problem(shape, spec);
      std::vector<ht::HtStep> steps;
      steps.push_back(ht::make_step(p, spec.seed + 1, my_rank(), /*fp8=*/true, node_size));
      ht::replace_payload(p, spec.seed + 2);
      steps.push_back(ht::make_step(std::move(p), spec.seed + 3, my_rank(), true, node_size));
      const std::string parts = in_parts ? "parts of 40 tokens" : "whole steps";
      ht::run_steps(group.get(), shape, steps, EPC_SIZING_CAPACITY, {ht::CallOptions{}},
                    "high throughput fp8 in " + parts + ", " + nodes_label(node_size));
    }
  }
}

// Across nodes combine reduces where dispatch forwarded each token, so a handle must
// dispatch (after creation and after every update) before it combines: otherwise the call
// is refused on every rank (a call out of order: EPC_ERR_INVALID_USAGE), before anything is
// queued, and the group stays usable.
TEST(VirtualNodes, CombineBeforeDispatchIsRefused) {
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  const ht::HtShape shape = world_shape(8, 1024, 64, 8);
  const int node_size = sizes.back();
  GroupPtr group;
  ASSERT_TRUE(create_split_group(shape, EPC_MODE_HIGH_THROUGHPUT, node_size, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  const ht::HtStep step =
      ht::make_step(ht::make_problem(shape, ht::random_spec(8, 47000)), 47001, my_rank(), false, node_size);
  ht::HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, 8));
  ASSERT_TRUE(buffers.upload(step, ht::CallOptions{}, s));
  HandlePtr handle;
  ASSERT_TRUE(ht::create_handle(group.get(), buffers, EPC_SIZING_CAPACITY, s, handle));
  for (const char* when : {"after creation", "after an update"}) {
    EXPECT_EQ(ht::call_combine(handle.get(), buffers, s), EPC_ERR_INVALID_USAGE) << when;
    EXPECT_NE(last_error().find("epc_dispatch"), std::string::npos) << when << ": " << last_error();
    ASSERT_TRUE(ht::dispatch_and_combine(handle.get(), buffers, s)) << when;
    EXPECT_TRUE(buffers.check(step, s, std::string("combine after dispatch, ") + when));
    ASSERT_TRUE(ht::update_handle(handle.get(), buffers, s));
  }
}

// HT steps in parts (core/ht/ht_parts.hpp; EPCOMM_HT_PART_TOKENS, read at group creation):
// parts of 96 and of 7 tokens on T = 256 (three parts, the last of 64; 37 parts, the last of
// 4), every part its own step on its own layout, must give the whole step's rows and sums bit
// for bit: the skewed routing above (one rank without tokens), forward then backward, on
// EXACT and CAPACITY handles, on every split of the world into nodes.
TEST(VirtualNodes, HighThroughputStepsInPartsMatchTheReference) {
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  const ht::HtShape shape = world_shape(16, 2048, 256, 8);
  for (const char* part_tokens : {"96", "7"}) {
    for (int node_size : sizes) {
      GroupPtr group;
      ASSERT_TRUE(create_group_in_parts(part_tokens, shape, node_size, group));
      ht::ProblemSpec spec = ht::random_spec(8, 0);
      spec.hot_expert_share = 0.3;
      spec.hot_expert = 2;
      spec.empty_rank = context().env.world_size - 1;
      spec.seed = 48000 + node_size;
      ref::Problem p = ht::make_problem(shape, spec);
      std::vector<ht::HtStep> steps;
      steps.push_back(ht::make_step(p, spec.seed + 1, my_rank(), false, node_size));
      ht::replace_payload(p, spec.seed + 2);
      steps.push_back(ht::make_step(std::move(p), spec.seed + 3, my_rank(), false, node_size));
      ht::CallOptions backward = ht::payload_only();
      backward.backward_weights = true;
      const std::string label =
          "high throughput in parts of " + std::string(part_tokens) + " tokens, " + nodes_label(node_size);
      for (EpcSizing sizing : {EPC_SIZING_EXACT, EPC_SIZING_CAPACITY}) {
        ht::run_steps(group.get(), shape, steps, sizing, {ht::CallOptions{}, backward}, label);
      }
    }
  }
}

// Steps in parts inside captured graphs: a CAPACITY handle's update, dispatch and combine
// captured once and replayed with new routing and payloads, another handle stepping eagerly
// between the replays on the same window, then an eager step on the first.
TEST(VirtualNodes, HighThroughputPartsInGraphReplaysAndInterleavedHandles) {
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  const ht::HtShape shape = world_shape(16, 2048, 256, 8);
  const int node_size = sizes.front();
  GroupPtr group;
  ASSERT_TRUE(create_group_in_parts("64", shape, node_size, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  ht::CallOptions options;
  options.backward_weights = true;
  ht::HtBuffers buffers, other_buffers;
  ASSERT_TRUE(buffers.allocate(shape, 8));
  ASSERT_TRUE(other_buffers.allocate(shape, 8));
  auto step_for = [&](int s) {
    ht::ProblemSpec spec = ht::random_spec(8, 49000 + 10 * static_cast<uint64_t>(s));
    spec.random_token_counts = false;  // B is part of the graph
    spec.tokens = 200;                 // four parts, the last of 8 tokens
    return ht::make_step(ht::make_problem(shape, spec), spec.seed + 1, my_rank(), false, node_size);
  };
  const ht::HtStep warmup = step_for(0);
  ASSERT_TRUE(buffers.upload(warmup, options, stream.get()));
  HandlePtr handle, other;
  ASSERT_TRUE(ht::create_handle(group.get(), buffers, EPC_SIZING_CAPACITY, stream.get(), handle));
  ASSERT_TRUE(ht::dispatch_and_combine(handle.get(), buffers, stream.get()));
  buffers.check(warmup, stream.get(), "eager warm-up before capture");
  GraphExecPtr exec;
  ASSERT_TRUE(capture_on_every_rank(
      stream.get(),
      [&] {
        ::testing::AssertionResult r = ht::update_handle(handle.get(), buffers, stream.get());
        if (r) r = ht::dispatch_and_combine(handle.get(), buffers, stream.get());
        return r;
      },
      exec));
  ht::ProblemSpec other_spec = ht::random_spec(8, 49500);
  const ht::HtStep other_step =
      ht::make_step(ht::make_problem(shape, other_spec), other_spec.seed + 1, my_rank(), false, node_size);
  ASSERT_TRUE(other_buffers.upload(other_step, options, stream.get()));
  ASSERT_TRUE(ht::create_handle(group.get(), other_buffers, EPC_SIZING_EXACT, stream.get(), other));
  for (int s = 1; s <= 3; ++s) {
    const ht::HtStep step = step_for(s);
    ASSERT_TRUE(buffers.upload(step, options, stream.get()));
    ASSERT_TRUE(cuda_ok(cudaGraphLaunch(exec.get(), stream.get()), "cudaGraphLaunch"));
    buffers.check(step, stream.get(), "graph replay " + std::to_string(s));
    ASSERT_TRUE(ht::dispatch_and_combine(other.get(), other_buffers, stream.get()));
    other_buffers.check(other_step, stream.get(), "the other handle after replay " + std::to_string(s));
  }
  const ht::HtStep after = step_for(4);
  ASSERT_TRUE(buffers.upload(after, options, stream.get()));
  ASSERT_TRUE(ht::update_handle(handle.get(), buffers, stream.get()));
  ASSERT_TRUE(ht::dispatch_and_combine(handle.get(), buffers, stream.get()));
  buffers.check(after, stream.get(), "eager step after the graph replays");
}

// What steps in parts cannot serve is refused when the handle is created, naming the
// variable that turns parts off: a FLAT capacity below recv_capacity (its drops must keep
// the lowest (source rank, source token) of the whole step, not of each part). Nothing is
// queued, and the group stays usable.
TEST(VirtualNodes, HandlesThatPartsCannotServeAreRefused) {
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  const ht::HtShape shape = world_shape(16, 2048, 256, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group_in_parts("100", shape, sizes.back(), group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  EpcHandleConfig small = handle_config(EPC_SIZING_CAPACITY);
  small.capacity = static_cast<uint64_t>(shape.max_rows()) / 2;
  EpcHandle* handle = nullptr;
  EXPECT_EQ(epc_handle_create(group.get(), &small, nullptr, stream.get(), &handle), EPC_ERR_UNSUPPORTED);
  EXPECT_EQ(handle, nullptr);
  EXPECT_NE(last_error().find("EPCOMM_HT_PART_TOKENS"), std::string::npos) << last_error();
  // The group stays usable: a FLAT handle of the default capacity steps.
  const ht::HtStep step =
      ht::make_step(ht::make_problem(shape, ht::random_spec(8, 49900)), 49901, my_rank(), false, sizes.back());
  ht::run_steps(group.get(), shape, {step}, EPC_SIZING_CAPACITY, {ht::CallOptions{}}, "after the refusals");
}

// A node size that does not divide the NVLink team is refused on every rank before any
// collective step, with a message naming the field.
TEST(VirtualNodes, NodeSizeThatDoesNotDivideTheTeamIsRefused) {
  const int world = context().env.world_size;
  const Shape shape = world_shape(8, 1024, 16, 4);
  for (int bad : {world + 1, world == 4 ? 3 : 2 * world}) {
    EpcGroupConfig config = group_config(shape, EPC_MODE_LOW_LATENCY);
    config.virtual_node_size = static_cast<uint32_t>(bad);
    EpcGroup* raw = nullptr;
    EXPECT_EQ(epc_group_create(context().comm, &config, &raw), EPC_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_EQ(raw, nullptr);
    EXPECT_NE(last_error().find("virtual_node_size"), std::string::npos) << last_error();
  }
}

}  // namespace
}  // namespace epc::gputest
