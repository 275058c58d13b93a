// SPDX-License-Identifier: Apache-2.0
// High-throughput dispatch over the node's credit rings (EPCOMM_HT_RING_SLOTS and
// EPCOMM_HT_RING_CHANNELS, core/ht/ht_rings.hpp), compared bit for bit with the reference as
// the slot path is (ht_case.hpp): rings of 1 to 3 slots and 1 to 3 channels, far fewer slots
// than rows, so every ring wraps many times in a step; several steps and handles on one group,
// so the rings' counters carry over between launches; fp8 passthrough rows with their scales.
// On one rank every row goes through the rank's ring to itself, both ways; on several, through
// every pair of ranks of the node. Combine returns the rows through rings too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/harness/scoped_env.hpp"
#include "tests/reference/reference.hpp"

namespace epc::gputest::ht {
namespace {

// Sets the two variables for the lifetime of the object (the planner reads them at group
// creation); unsets them after.
class ForcedRings {
 public:
  ForcedRings(int slots, int channels)
      : slots_("EPCOMM_HT_RING_SLOTS", std::to_string(slots).c_str()),
        channels_("EPCOMM_HT_RING_CHANNELS", std::to_string(channels).c_str()) {}

 private:
  test::ScopedEnv slots_, channels_;
};

::testing::AssertionResult create_ring_group(const HtShape& shape, int slots, int channels, GroupPtr& out,
                                             EpcDtype window = EPC_DTYPE_BF16) {
  ForcedRings rings(slots, channels);
  return create_group(shape, EPC_MODE_HIGH_THROUGHPUT, out, window);
}

CallOptions all_outputs(bool backward_weights) {
  CallOptions o;
  o.backward_weights = backward_weights;
  return o;
}

struct RingCase {
  int slots;
  int channels;
};

class HighThroughputRings : public ::testing::TestWithParam<RingCase> {};

// Three steps with new routing (on several ranks one without tokens), on EXACT handles (one per step)
// and then on one CAPACITY handle; then one handle reused with new payloads.
TEST_P(HighThroughputRings, MatchTheReference) {
  const RingCase& c = GetParam();
  const std::string label =
      "rings of " + std::to_string(c.slots) + " slots, " + std::to_string(c.channels) + " channels";
  const HtShape shape = world_shape(16, 2048, 256, 8);
  GroupPtr group;
  ASSERT_TRUE(create_ring_group(shape, c.slots, c.channels, group));
  ProblemSpec spec = random_spec(8, 61000 + 10 * c.slots + c.channels);
  if (shape.nranks > 1) spec.empty_rank = shape.nranks - 1;  // one rank keeps its tokens
  const std::vector<HtStep> steps = make_steps(shape, spec, 3, my_rank());
  run_steps(group.get(), shape, steps, EPC_SIZING_EXACT, {all_outputs(false)}, label);
  run_steps(group.get(), shape, steps, EPC_SIZING_CAPACITY, {all_outputs(true), payload_only()}, label);

  ref::Problem p = make_problem(shape, random_spec(8, 61500 + c.slots));
  std::vector<HtStep> reuse;
  for (uint64_t s = 0; s < 3; ++s) {
    if (s > 0) replace_payload(p, 61600 + s);
    reuse.push_back(make_step(p, 61700 + s, my_rank()));
  }
  run_steps(group.get(), shape, reuse, EPC_SIZING_EXACT, {all_outputs(false)}, label + ", handle reuse");
}

INSTANTIATE_TEST_SUITE_P(Capacities, HighThroughputRings,
                         ::testing::Values(RingCase{1, 1}, RingCase{1, 3}, RingCase{2, 2}, RingCase{3, 1},
                                           RingCase{3, 3}),
                         [](const ::testing::TestParamInfo<RingCase>& info) {
                           return "Slots" + std::to_string(info.param.slots) + "Channels" +
                                  std::to_string(info.param.channels);
                         });

// Graph replays go on counting where the eager steps stopped, and a second handle's eager
// steps between the replays share the same rings: one CAPACITY handle's update, dispatch and
// combine captured once (global capture mode) and replayed four times with new routing and
// payloads, an EXACT handle stepping eagerly between replays, then an eager step on the first.
TEST(HighThroughputRingsPayload, GraphReplaysAndInterleavedHandles) {
  const HtShape shape = world_shape(16, 2048, 256, 8);
  GroupPtr group;
  ASSERT_TRUE(create_ring_group(shape, 2, 3, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const CallOptions options = all_outputs(true);
  HtBuffers buffers, other_buffers;
  ASSERT_TRUE(buffers.allocate(shape, 8));
  ASSERT_TRUE(other_buffers.allocate(shape, 8));
  auto step_for = [&](int s) {
    ProblemSpec spec = random_spec(8, 64000 + 10 * static_cast<uint64_t>(s));
    spec.random_token_counts = false;  // B is part of the graph
    spec.tokens = 200;
    if (shape.nranks > 1) spec.empty_rank = shape.nranks - 1;  // one rank keeps its tokens
    return make_step(make_problem(shape, spec), spec.seed + 1, my_rank());
  };
  const HtStep warmup = step_for(0);
  ASSERT_TRUE(buffers.upload(warmup, options, stream.get()));
  HandlePtr handle, other;
  ASSERT_TRUE(create_handle(group.get(), buffers, EPC_SIZING_CAPACITY, stream.get(), handle));
  ASSERT_TRUE(dispatch_and_combine(handle.get(), buffers, stream.get()));
  buffers.check(warmup, stream.get(), "eager warm-up before capture");
  GraphExecPtr exec;
  ASSERT_TRUE(capture_on_every_rank(
      stream.get(),
      [&] {
        ::testing::AssertionResult r = update_handle(handle.get(), buffers, stream.get());
        if (r) r = dispatch_and_combine(handle.get(), buffers, stream.get());
        return r;
      },
      exec));
  const std::vector<HtStep> others = make_steps(shape, random_spec(8, 65000), 1, my_rank());
  ASSERT_TRUE(other_buffers.upload(others[0], options, stream.get()));
  ASSERT_TRUE(create_handle(group.get(), other_buffers, EPC_SIZING_EXACT, stream.get(), other));
  for (int s = 1; s <= 4; ++s) {
    const HtStep step = step_for(s);
    ASSERT_TRUE(buffers.upload(step, options, stream.get()));
    ASSERT_TRUE(cuda_ok(cudaGraphLaunch(exec.get(), stream.get()), "cudaGraphLaunch"));
    buffers.check(step, stream.get(), "graph replay " + std::to_string(s));
    ASSERT_TRUE(other_buffers.upload(others[0], options, stream.get()));
    ASSERT_TRUE(dispatch_and_combine(other.get(), other_buffers, stream.get()));
    other_buffers.check(others[0], stream.get(), "the other handle after replay " + std::to_string(s));
  }
  const HtStep after = step_for(5);
  ASSERT_TRUE(buffers.upload(after, options, stream.get()));
  ASSERT_TRUE(update_handle(handle.get(), buffers, stream.get()));
  ASSERT_TRUE(dispatch_and_combine(handle.get(), buffers, stream.get()));
  buffers.check(after, stream.get(), "eager step after the graph replays");
}

// EPC_OVERFLOW_DROP over rings: handles at, below and far below the rows a step needs keep
// the lowest (source rank, source token) rows, as the reference's capacity rule says, and
// combine returns exactly the kept rows through the rings.
TEST(HighThroughputRingsPayload, DropKeepsTheLowestRows) {
  const HtShape shape = world_shape(8, 2048, 256, 8);
  GroupPtr group;
  {
    ForcedRings rings(2, 2);
    EpcGroupConfig config = group_config(shape, EPC_MODE_HIGH_THROUGHPUT);
    config.overflow = EPC_OVERFLOW_DROP;
    EpcGroup* created = nullptr;
    ASSERT_TRUE(epc_ok(epc_group_create(context().comm, &config, &created), "epc_group_create(HT, DROP, rings)"));
    group.reset(created);
  }
  Stream stream;
  ASSERT_TRUE(stream.status());
  HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, 8));
  ProblemSpec spec = random_spec(8, 66000);
  spec.random_token_counts = false;
  spec.hot_expert_share = 0.3;
  const ref::Problem problem = make_problem(shape, spec);
  const std::vector<int32_t> received = ref::ht_layout(problem).num_recv;
  const int64_t needed = *std::max_element(received.begin(), received.end());
  ASSERT_GT(needed, 4);
  for (int64_t capacity : {needed, needed / 2, int64_t{1}}) {
    const HtStep step = make_step(problem, 66001, my_rank(), false, 0, false, capacity);
    ASSERT_TRUE(buffers.upload(step, all_outputs(true), stream.get()));
    EpcHandleConfig hc = handle_config(EPC_SIZING_CAPACITY);
    hc.capacity = static_cast<uint64_t>(capacity);
    const EpcTensor idx = buffers.topk_idx();
    HandlePtr handle;
    ASSERT_TRUE(create_handle_with(group.get(), hc, &idx, stream.get(), handle, "epc_handle_create(rings, DROP)"));
    EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
    ASSERT_TRUE(query_handle(handle.get(), info));
    buffers.set_handle(EPC_SIZING_CAPACITY, info.rows);
    ASSERT_TRUE(dispatch_and_combine(handle.get(), buffers, stream.get()));
    buffers.check(step, stream.get(), "rings, DROP, capacity " + std::to_string(capacity));
  }
}

// The window a group with rings registers is the one epc_plan_query gives for the same
// environment, and it holds no [R][T] slots: far smaller than without rings.
TEST(HighThroughputRingsPayload, WindowIsWhatThePlanSays) {
  const HtShape shape = world_shape(16, 7168, 4096, 8);
  const EpcGroupConfig config = group_config(shape, EPC_MODE_HIGH_THROUGHPUT);
  auto planned = [&] {
    EpcPlan plan;
    std::memset(&plan, 0, sizeof plan);
    plan.struct_size = sizeof plan;
    plan.abi_version = EPC_ABI_VERSION;
    EXPECT_EQ(epc_plan_query(&config, shape.nranks, shape.nranks, 1, &plan), EPC_OK) << last_error();
    return plan.symmetric_bytes;
  };
  const uint64_t without = planned();
  ForcedRings rings(2, 8);
  const uint64_t with = planned();
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  EpcGroupInfo info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.abi_version = EPC_ABI_VERSION;
  ASSERT_EQ(epc_group_query(group.get(), &info), EPC_OK) << last_error();
  EXPECT_EQ(info.symmetric_bytes, with);
  EXPECT_LT(with * 10, without) << "with rings " << with << " bytes, without " << without;
}

// fp8 rows and their scales, copied unchanged through rings of 2 slots, hidden 7168.
TEST(HighThroughputRingsPayload, Fp8RowsAndScales) {
  const HtShape shape = world_shape(16, 7168, 128, 8);
  GroupPtr group;
  ASSERT_TRUE(create_ring_group(shape, 2, 2, group));
  ProblemSpec spec = random_spec(8, 62000);
  spec.fp8 = true;
  ref::Problem p = make_problem(shape, spec);
  std::vector<HtStep> steps;
  steps.push_back(make_step(p, 62001, my_rank(), /*fp8=*/true));
  replace_payload(p, 62002);
  steps.push_back(make_step(std::move(p), 62003, my_rank(), true));
  run_steps(group.get(), shape, steps, EPC_SIZING_CAPACITY, {all_outputs(true)}, "fp8 through rings");
}

// A send-only dispatch or combine is refused (the readers run in the sending launch), and so
// is a combine before any dispatch on the handle (the rings return rows in the token order
// dispatch recorded); the refusals change nothing: the same step then runs whole and matches.
TEST(HighThroughputRingsPayload, SendOnlyAndCombineFirstAreRefused) {
  const HtShape shape = world_shape(16, 2048, 64, 8);
  GroupPtr group;
  ASSERT_TRUE(create_ring_group(shape, 1, 1, group));
  const std::vector<HtStep> steps = make_steps(shape, random_spec(8, 63000), 1, my_rank());
  Stream stream;
  ASSERT_TRUE(stream.status());
  HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, 8));
  ASSERT_TRUE(buffers.upload(steps[0], all_outputs(false), stream.get()));
  HandlePtr handle;
  ASSERT_TRUE(create_handle(group.get(), buffers, EPC_SIZING_EXACT, stream.get(), handle));
  EXPECT_EQ(call_combine(handle.get(), buffers, stream.get()), EPC_ERR_INVALID_USAGE) << last_error();
  EXPECT_EQ(call_dispatch(handle.get(), buffers, stream.get(), EPC_STEP_SEND_ONLY), EPC_ERR_UNSUPPORTED)
      << last_error();
  ASSERT_TRUE(dispatch(handle.get(), buffers, stream.get()));
  EXPECT_EQ(call_combine(handle.get(), buffers, stream.get(), EPC_STEP_SEND_ONLY), EPC_ERR_UNSUPPORTED) << last_error();
  ASSERT_TRUE(combine(handle.get(), buffers, stream.get()));
  EXPECT_TRUE(buffers.check(steps[0], stream.get(), "after refused calls"));
}

}  // namespace
}  // namespace epc::gputest::ht
