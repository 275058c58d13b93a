// SPDX-License-Identifier: Apache-2.0
// HT receive capacity on real GPUs (EpcGroupConfig.recv_capacity and overflow,
// EpcHandleConfig.capacity), compared bit for bit with the reference model's capacity rule
// (reference.hpp, "Receive capacity"): FLAT handles above, at and below the rows they need;
// EPC_OVERFLOW_DROP keeps the lowest (source rank, source token) rows and counts the rest;
// EPC_OVERFLOW_FAIL writes nothing and reports (epc_handle_query, then EPC_ERR_CAPACITY);
// neither is sticky; a receive window below R * T with EXACT and CAPACITY sizing, and at,
// below and far below the need under both policies; graph replays that overflow and fit in
// turn. HtBuffers::check also proves that nothing is written past a handle's rows (its
// buffers hold R * T rows, poisoned).
//
// Every case runs on one node and across nodes (virtual nodes of 1 rank, and of 2 from 4
// ranks on): there a token crosses to its rail peer, which forwards it into the dispatch
// slots of its node's ranks where their compact windows hold its source's rows
// (kernels/wire/ht_capacity.hpp, ht_forward_slot), and combine reduces inside each node first
// (the reference model's order for `node_size`).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/reference/reference.hpp"

namespace epc::gputest::ht {
namespace {

constexpr int K = 8;

// The parameter: the group's virtual_node_size (0: one node; 1: every rank its own node;
// 2: nodes of two ranks, from 4 ranks on).
class HighThroughputCapacity : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    const int world = context().env.world_size;
    if (node_size_ > 0 && (world % node_size_ != 0 || world / node_size_ < 2)) {
      GTEST_SKIP() << "nodes of " << node_size_ << " need a multiple of " << node_size_ << " ranks, at least "
                   << 2 * node_size_;
    }
    ASSERT_TRUE(stream_.status());
    ASSERT_TRUE(buffers_.allocate(shape_, K));
  }

  // An HT group whose window holds `recv_capacity` tokens (0: R * T) under `overflow`, split
  // into nodes of node_size_ ranks (any handle of the previous group destroyed first).
  void make_group(uint64_t recv_capacity, EpcOverflow overflow) {
    handle_.reset();
    EpcGroupConfig c = group_config(shape_, EPC_MODE_HIGH_THROUGHPUT);
    c.recv_capacity = recv_capacity;
    c.overflow = overflow;
    c.virtual_node_size = static_cast<uint32_t>(node_size_);
    EpcGroup* group = nullptr;
    ASSERT_TRUE(epc_ok(epc_group_create(context().comm, &c, &group),
                       "epc_group_create(HT, recv_capacity " + std::to_string(recv_capacity) + ", " + nodes() + ")"));
    group_.reset(group);
    EpcGroupInfo info = EPC_GROUP_INFO_INIT;
    ASSERT_EQ(epc_group_query(group, &info), EPC_OK);
    if (node_size_ > 0) {
      ASSERT_EQ(info.num_nodes, shape_.nranks / node_size_) << nodes();
    }
  }

  std::string nodes() const { return node_size_ == 0 ? "one node" : "nodes of " + std::to_string(node_size_); }

  // A FLAT handle of `capacity` rows (0: the default) routed by the uploaded step.
  void make_handle(EpcSizing sizing, uint64_t capacity) {
    EpcHandleConfig hc = handle_config(sizing);
    hc.capacity = capacity;
    const EpcTensor idx = buffers_.topk_idx();
    ASSERT_TRUE(create_handle_with(group_.get(), hc, &idx, stream_.get(), handle_,
                                   "epc_handle_create(HT FLAT, capacity " + std::to_string(capacity) + ")"));
    EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
    ASSERT_TRUE(query_handle(handle_.get(), info));
    buffers_.set_handle(sizing, info.rows);
  }

  // Random routing, B = T on every rank, ~10% masked: most tokens reach some rank.
  HtStep step(uint64_t seed, int64_t capacity, int tokens = -1) const {
    ProblemSpec spec = random_spec(K, seed);
    spec.random_token_counts = false;
    spec.tokens = tokens;
    spec.hot_expert_share = 0.3;
    spec.hot_expert = static_cast<int>(seed % 8);
    return make_step(make_problem(shape_, spec), seed + 1, my_rank(), false, node_size_, false, capacity);
  }

  // The most rows any rank receives in `s` (its capacity ignored).
  static int64_t need(const HtStep& s) {
    const std::vector<int32_t> n = ref::ht_layout(s.problem).num_recv;
    return *std::max_element(n.begin(), n.end());
  }

  // epc_handle_query's overflow fields against the reference (after the stream has passed).
  void expect_overflow(const HtStep& s, const std::string& label) {
    const ref::HtOverflow want = ref::ht_overflow_seen_by(ref::ht_layout(s.problem, s.capacity), my_rank());
    EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
    ASSERT_TRUE(query_handle(handle_.get(), info));
    EXPECT_EQ(info.overflow_status, want.rank >= 0 ? EPC_ERR_CAPACITY : EPC_OK) << label;
    EXPECT_EQ(info.overflow_rank, want.rank) << label;
    EXPECT_EQ(info.overflow_rows, want.rows) << label;
  }

  // The dispatch or combine of a step with no host synchronisation: one call, or with split_
  // its send-only call and epc_complete.
  EpcStatus call_half(bool dispatch) {
    const uint32_t flags = split_ ? EPC_STEP_SEND_ONLY : 0;
    const EpcStatus status = dispatch ? call_dispatch(handle_.get(), buffers_, stream_.get(), flags)
                                      : call_combine(handle_.get(), buffers_, stream_.get(), flags);
    if (!split_ || status != EPC_OK) return status;
    return epc_complete(handle_.get(), 0, stream_.get());
  }

  // Upload, update (unless `fresh`: the handle was just made from this upload), dispatch and
  // combine with no host synchronisation, compare, and check the query.
  void run(const HtStep& s, bool fresh, const std::string& label) {
    if (!fresh) {
      ASSERT_TRUE(update_handle(handle_.get(), buffers_, stream_.get()));
    }
    ASSERT_EQ(call_half(/*dispatch=*/true), EPC_OK) << label;
    ASSERT_EQ(call_half(/*dispatch=*/false), EPC_OK) << label;
    buffers_.check(
        s, stream_.get(),
        label + " (N=" + std::to_string(s.num_recv()) + ", kept " + std::to_string(s.rows()) + ", " + nodes() + ")");
    expect_overflow(s, label + ", " + nodes());
  }

  // EPC_OVERFLOW_FAIL, a step `over` that overflows `capacity` (uploaded, the handle routed
  // by it, nothing dispatched yet): its dispatch writes nothing on any rank, the query names
  // the rank and rows, and the next dispatch and combine return EPC_ERR_CAPACITY saying so.
  void expect_fail_step(const HtStep& over, int64_t capacity, const std::string& label) {
    ASSERT_EQ(call_half(/*dispatch=*/true), EPC_OK) << label;
    ASSERT_TRUE(cuda_ok(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize"));
    expect_overflow(over, label);
    // Nothing written anywhere: every output keeps its poison.
    std::vector<uint8_t> got_x(static_cast<size_t>(shape_.max_rows()) * shape_.hidden * 2);
    std::vector<int32_t> got_counts(shape_.local_experts()), got_n(1);
    ASSERT_TRUE(download_and_wait(
        {{got_x.data(), buffers_.out_x().data, got_x.size(), "out_x"},
         {got_counts.data(), buffers_.out_expert_counts().data, got_counts.size() * 4, "out_expert_counts"},
         {got_n.data(), buffers_.out_num_recv().data, 4, "out_num_recv"}},
        stream_.get()));
    EXPECT_EQ(std::count(got_x.begin(), got_x.end(), uint8_t{0xFF}), static_cast<long>(got_x.size())) << label;
    EXPECT_EQ(got_counts, std::vector<int32_t>(got_counts.size(), -1)) << label;
    EXPECT_EQ(got_n[0], -1) << label;
    // The next calls say so, naming the rank and the count.
    const ref::HtOverflow want = ref::ht_overflow_seen_by(ref::ht_layout(over.problem, capacity), my_rank());
    ASSERT_GE(want.rank, 0) << label << ": the step does not overflow";
    EXPECT_EQ(call_combine(handle_.get(), buffers_, stream_.get()), EPC_ERR_CAPACITY) << label;
    char message[512];
    ASSERT_EQ(epc_last_error(message, sizeof message, nullptr), EPC_OK);
    EXPECT_NE(std::string(message).find("rank " + std::to_string(want.rank)), std::string::npos) << message;
    EXPECT_NE(std::string(message).find(std::to_string(want.rows) + " rows"), std::string::npos) << message;
    EXPECT_EQ(call_dispatch(handle_.get(), buffers_, stream_.get()), EPC_ERR_CAPACITY) << label;
  }

  // DROP: a handle above (R * T), exactly at, and below the rows the step needs (1 row too); each
  // is a new handle on one group, then the one below the need runs a fitting step (not sticky).
  void drop_case() {
    ASSERT_NO_FATAL_FAILURE(make_group(0, EPC_OVERFLOW_DROP));
    const int64_t needed = need(step(500, 0));
    ASSERT_GT(needed, 4);
    ASSERT_LT(needed, shape_.max_rows());  // masked entries: some room above the need
    for (int64_t capacity : {int64_t{shape_.max_rows()}, needed, needed / 2, int64_t{1}}) {
      const HtStep s = step(500, capacity);
      ASSERT_TRUE(buffers_.upload(s, options_, stream_.get()));
      ASSERT_NO_FATAL_FAILURE(make_handle(EPC_SIZING_CAPACITY, static_cast<uint64_t>(capacity)));
      ASSERT_NO_FATAL_FAILURE(run(s, true, "capacity " + std::to_string(capacity)));
    }
    // The last handle (1 row) overflowed; a routing of fewer tokens that fits works on it
    // (B = 1 / R: every rank receives at most R * B rows).
    const int64_t one = 1;
    const HtStep fits = step(600, one, static_cast<int>(one / shape_.nranks));
    ASSERT_LE(need(fits), one);
    ASSERT_TRUE(buffers_.upload(fits, options_, stream_.get()));
    ASSERT_NO_FATAL_FAILURE(run(fits, false, "a fitting step after an overflow"));
    // And an overflowing one again, then the default capacity on a new handle.
    const HtStep again = step(700, one);
    ASSERT_TRUE(buffers_.upload(again, options_, stream_.get()));
    ASSERT_NO_FATAL_FAILURE(run(again, false, "overflowing again"));
  }

  // FAIL: the overflowing step writes nothing on any rank; the query names the rank and the
  // rows; the next dispatch and combine return EPC_ERR_CAPACITY; an update with a routing that
  // fits starts afresh.
  void fail_case() {
    ASSERT_NO_FATAL_FAILURE(make_group(0, EPC_OVERFLOW_FAIL));
    const int64_t capacity = need(step(800, 0)) / 2;
    ASSERT_GT(capacity, 0);
    const HtStep fits = step(900, capacity, static_cast<int>(capacity / shape_.nranks));
    ASSERT_LE(need(fits), capacity);
    ASSERT_TRUE(buffers_.upload(fits, options_, stream_.get()));
    ASSERT_NO_FATAL_FAILURE(make_handle(EPC_SIZING_CAPACITY, static_cast<uint64_t>(capacity)));
    ASSERT_NO_FATAL_FAILURE(run(fits, true, "a step that fits"));

    const HtStep over = step(800, capacity);
    ASSERT_TRUE(buffers_.upload(over, options_, stream_.get()));  // poisons every output
    ASSERT_TRUE(update_handle(handle_.get(), buffers_, stream_.get()));
    // The dispatch of the overflowing routing is queued (no host synchronisation decides it).
    ASSERT_NO_FATAL_FAILURE(expect_fail_step(over, capacity, "FAIL overflow"));
    // Not sticky: the next routing that fits runs and matches the reference.
    ASSERT_TRUE(buffers_.upload(fits, options_, stream_.get()));
    ASSERT_NO_FATAL_FAILURE(run(fits, false, "a fitting step after a FAIL overflow"));
    EXPECT_EQ(epc_group_async_error(group_.get()), EPC_OK);
  }

  const int node_size_ = GetParam();
  bool split_ = false;  // steps as send-only calls and epc_complete (one node only)
  const HtShape shape_ = world_shape(8, 2048, 256, K);
  const CallOptions options_;  // every optional tensor, combine with backward weights
  GroupPtr group_;
  Stream stream_;
  HtBuffers buffers_;
  HandlePtr handle_;
};

TEST_P(HighThroughputCapacity, DropKeepsTheLowestRowsAboveAtAndBelowTheNeed) { drop_case(); }

TEST_P(HighThroughputCapacity, FailWritesNothingReportsAndIsNotSticky) { fail_case(); }

// Both again with every step split into its send-only calls and epc_complete: the send half's
// layout reports the overflow to the host as a fused dispatch's does.
TEST_P(HighThroughputCapacity, SplitStepsDropAndFailAsFusedOnes) {
  if (node_size_ > 0) GTEST_SKIP() << "EPC_STEP_SEND_ONLY is served on one-node high-throughput groups only";
  split_ = true;
  ASSERT_NO_FATAL_FAILURE(drop_case());
  ASSERT_NO_FATAL_FAILURE(fail_case());
}

// A receive window below R * T (compact dispatch slots): EXACT handles take min(N, window)
// rows, CAPACITY handles default to the window; DROP keeps the lowest rows.
TEST_P(HighThroughputCapacity, SmallerWindowWithExactAndCapacitySizing) {
  const int64_t window = need(step(1000, 0)) * 2 / 3;
  ASSERT_GT(window, 0);
  ASSERT_NO_FATAL_FAILURE(make_group(static_cast<uint64_t>(window), EPC_OVERFLOW_DROP));
  EpcGroupInfo gi = EPC_GROUP_INFO_INIT;
  ASSERT_EQ(epc_group_query(group_.get(), &gi), EPC_OK);
  EXPECT_EQ(gi.recv_capacity, static_cast<uint64_t>(window));
  for (EpcSizing sizing : {EPC_SIZING_EXACT, EPC_SIZING_CAPACITY}) {
    const std::string name = sizing_name(sizing);
    const HtStep s = step(1000, window);
    ASSERT_TRUE(buffers_.upload(s, options_, stream_.get()));
    ASSERT_NO_FATAL_FAILURE(make_handle(sizing, 0));
    ASSERT_NO_FATAL_FAILURE(run(s, true, name + " on a smaller window"));
    const HtStep next = step(1100, window);  // new routing on the same handle
    ASSERT_TRUE(buffers_.upload(next, options_, stream_.get()));
    if (sizing == EPC_SIZING_EXACT) {
      ASSERT_TRUE(update_handle(handle_.get(), buffers_, stream_.get()));
      EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
      ASSERT_TRUE(query_handle(handle_.get(), info));
      buffers_.set_handle(sizing, info.rows);
      ASSERT_TRUE(dispatch_and_combine(handle_.get(), buffers_, stream_.get()));
      buffers_.check(next, stream_.get(), name + " updated on a smaller window");
      expect_overflow(next, name + " updated on a smaller window");
    } else {
      ASSERT_NO_FATAL_FAILURE(run(next, false, name + " updated on a smaller window"));
    }
  }
  // EXPERT_PACKED needs the whole window.
  EpcHandleConfig packed = handle_config();
  packed.layout = EPC_LAYOUT_EXPERT_PACKED;
  EpcHandle* h = nullptr;
  EXPECT_EQ(epc_handle_create(group_.get(), &packed, nullptr, stream_.get(), &h), EPC_ERR_UNSUPPORTED);
  EXPECT_EQ(h, nullptr);
}

// Receive windows at, below and far below (1 row) the rows a step needs, under DROP and
// FAIL, each a new group with a FLAT CAPACITY handle of the window's rows: compact dispatch
// slots below R * T, which across nodes the forwarders fill too. DROP keeps the lowest rows;
// FAIL writes nothing and reports, and a step that fits runs next on the same handle.
TEST_P(HighThroughputCapacity, SmallerWindowsAtBelowAndFarBelowTheNeed) {
  const int64_t needed = need(step(1400, 0));
  ASSERT_GT(needed, 4);
  ASSERT_LT(needed, shape_.max_rows());  // at the need, the window is compact too
  for (EpcOverflow overflow : {EPC_OVERFLOW_DROP, EPC_OVERFLOW_FAIL}) {
    for (int64_t window : {needed, needed / 2, int64_t{1}}) {
      const std::string label = std::string(overflow == EPC_OVERFLOW_DROP ? "DROP" : "FAIL") + ", a window of " +
                                std::to_string(window) + " rows (the need " + std::to_string(needed) + ")";
      ASSERT_NO_FATAL_FAILURE(make_group(static_cast<uint64_t>(window), overflow));
      const HtStep s = step(1400, window);
      ASSERT_TRUE(buffers_.upload(s, options_, stream_.get()));
      ASSERT_NO_FATAL_FAILURE(make_handle(EPC_SIZING_CAPACITY, 0));
      ASSERT_EQ(buffers_.rows(), window) << label;
      if (overflow == EPC_OVERFLOW_DROP || window >= needed) {
        ASSERT_NO_FATAL_FAILURE(run(s, true, label));
        continue;
      }
      ASSERT_NO_FATAL_FAILURE(expect_fail_step(s, window, label));
      // Not sticky: a routing that fits (B = window / R: at most R * B rows reach a rank).
      const HtStep fits = step(1500, window, static_cast<int>(window / shape_.nranks));
      ASSERT_LE(need(fits), window);
      ASSERT_TRUE(buffers_.upload(fits, options_, stream_.get()));
      ASSERT_NO_FATAL_FAILURE(run(fits, false, label + ", then a step that fits"));
    }
  }
  EXPECT_EQ(epc_group_async_error(group_.get()), EPC_OK);
}

// CAPACITY sizing is graph-safe with a capacity too: one capture of [update, dispatch,
// combine], replayed with routings that overflow (DROP) and fit in turn, B fixed.
TEST_P(HighThroughputCapacity, GraphReplaysOverflowAndFitInTurn) {
  ASSERT_NO_FATAL_FAILURE(make_group(0, EPC_OVERFLOW_DROP));
  const int64_t capacity = need(step(1200, 0)) * 3 / 4;
  ASSERT_GT(capacity, 0);
  auto masked_to_fit = [&](uint64_t seed) {
    // The same B as the capture, every entry of tokens past `capacity / R` masked: fits.
    HtStep s = step(seed, capacity);
    ref::Problem p = s.problem;
    for (ref::RankTokens& r : p.ranks) {
      for (int t = static_cast<int>(capacity / shape_.nranks); t < r.num_tokens; ++t) {
        std::fill_n(r.topk_idx.begin() + static_cast<long>(t) * K, K, int64_t{-1});
      }
    }
    return make_step(p, seed + 1, my_rank(), false, node_size_, false, capacity);
  };
  {
    const HtStep warmup = step(1200, capacity);
    ASSERT_TRUE(buffers_.upload(warmup, options_, stream_.get()));
    ASSERT_NO_FATAL_FAILURE(make_handle(EPC_SIZING_CAPACITY, static_cast<uint64_t>(capacity)));
    ASSERT_NO_FATAL_FAILURE(run(warmup, true, "eager warm-up before capture"));
  }
  GraphExecPtr exec;
  const cudaStream_t stream = stream_.get();
  ASSERT_TRUE(capture_on_every_rank(
      stream,
      [&] {
        ::testing::AssertionResult r = update_handle(handle_.get(), buffers_, stream);
        if (r) r = dispatch_and_combine(handle_.get(), buffers_, stream);
        return r;
      },
      exec));
  for (int i = 1; i <= 4; ++i) {
    const uint64_t seed = 1300 + 10 * static_cast<uint64_t>(i);
    const HtStep s = i % 2 == 1 ? step(seed, capacity) : masked_to_fit(seed);
    ASSERT_TRUE(buffers_.upload(s, options_, stream));
    ASSERT_TRUE(cuda_ok(cudaGraphLaunch(exec.get(), stream), "cudaGraphLaunch"));
    const std::string label = "graph replay " + std::to_string(i) + (i % 2 == 1 ? " (overflows)" : " (fits)");
    buffers_.check(s, stream, label + " (N=" + std::to_string(s.num_recv()) + ")");
    expect_overflow(s, label);  // the replayed layout's report
  }
}

INSTANTIATE_TEST_SUITE_P(NodeSizes, HighThroughputCapacity, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("OneNode") : "NodesOf" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace epc::gputest::ht
