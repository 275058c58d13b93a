// SPDX-License-Identifier: Apache-2.0
// HT EPC_LAYOUT_EXPERT_PACKED on real GPUs, compared bit for bit with the reference model
// (ref::ht_dispatch_packed, ref::ht_combine_packed): rows, scales, per-row weights, counts,
// offsets and entries received; padding rows zeroed with EPC_HANDLE_ZERO_PADDING and left
// untouched (still the 0xFF poison) without it; combine weighted on the expert's rank
// (the default) and as given, with backward weights; on groups with
// EPC_GROUP_COMBINE_PER_ENTRY also weighted on the token's rank (EPC_WEIGHTING_HOME,
// ref::ht_combine_packed_home) into bf16 with backward weights and into fp32 (the unrounded
// sum); top-k 1 and 2, where combine as given sums a token's one row on a rank as it stands;
// the same with every call split by EPC_STEP_SEND_ONLY and epc_complete (ABI 2.1,
// split_step.hpp), in a CUDA graph too; on groups split into virtual nodes (every node size
// that makes two nodes or more), where tokens cross between nodes by rail and the nodes'
// partials are summed inside each node first (ref::ht_combine_packed's node order), several
// steps on one group. Every rank builds the same problem and checks its own part.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/gpu/split_step.hpp"
#include "tests/harness/scoped_env.hpp"
#include "tests/reference/reference_ht_packed.hpp"

namespace epc::gputest::ht {
namespace {

struct PackedCase {
  int alignment;
  bool zero_padding;
  EpcSizing sizing;
  bool fp8;
  EpcDtype offsets_dtype;
  bool per_entry;  // the group has EPC_GROUP_COMBINE_PER_ENTRY: combine also with EPC_WEIGHTING_HOME
  int topk = 8;    // at most the rank count: combine as given runs the lone-row kernels
};

// The group a case runs on: its own (node_size 0: one node), or `group`, split into virtual
// nodes of `node_size` ranks.
struct CaseGroup {
  EpcGroup* group = nullptr;
  int node_size = 0;
};

// First mismatching byte of rows [0, rows) of `row_bytes`, or -1.
int64_t first_mismatch(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, int64_t bytes) {
  for (int64_t i = 0; i < bytes; ++i) {
    if (got[i] != want[i]) return i;
  }
  return -1;
}

// Dispatch, then combine twice, each call queued as `mode` says, on the case's own group or
// on `on.group`.
void run_case(const PackedCase& k, uint64_t seed, SplitMode mode, SplitRunner& runner, const CaseGroup& on = {}) {
  const std::string label = "alignment " + std::to_string(k.alignment) + (k.zero_padding ? " zero-padded " : " ") +
                            sizing_name(k.sizing) + (k.fp8 ? " fp8, " : " bf16, ") +
                            (k.per_entry ? "per-entry window, " : "") + "top-" + std::to_string(k.topk) + ", " +
                            split_name(mode) + (on.node_size > 0 ? ", nodes of " + std::to_string(on.node_size) : "");
  const HtShape shape = world_shape(8, 2048, 128, 8);
  ProblemSpec spec = random_spec(k.topk, seed);
  spec.fp8 = k.fp8;
  spec.duplicates = seed % 2 == 0;
  const ref::Problem p = make_problem(shape, spec);
  const int rank = my_rank(), R = shape.nranks, L = shape.local_experts(), H = shape.hidden, K = p.topk;
  ref::HtPackedOptions po;
  po.alignment = k.alignment;
  po.payload = k.fp8 ? ref::HtPayload::kFp8 : ref::HtPayload::k16Bit;
  const std::vector<ref::HtPackedResult> all = ref::ht_dispatch_packed(p, po);
  const ref::HtPackedResult& want = all[rank];
  std::mt19937_64 engine(seed + 7);
  std::vector<std::vector<uint16_t>> y(R);
  std::vector<std::vector<float>> g(R);
  for (int q = 0; q < R; ++q) {
    for (int64_t i = 0; i < int64_t{all[q].rows} * H; ++i) y[q].push_back(random_bf16(engine));
    for (int i = 0; i < all[q].rows; ++i) g[q].push_back(static_cast<float>(q * 1000 + i));
  }
  const ref::HtCombineResult weighted = ref::ht_combine_packed(p, y, true, k.alignment, g, on.node_size);
  const ref::HtCombineResult plain = ref::ht_combine_packed(p, y, false, k.alignment, {}, on.node_size);
  const ref::RankTokens& mine = p.ranks[rank];
  const int B = mine.num_tokens;

  GroupPtr own_group;
  if (on.group == nullptr) {
    ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, own_group, EPC_DTYPE_BF16,
                             k.per_entry ? EPC_GROUP_COMBINE_PER_ENTRY : 0u));
  }
  EpcGroup* group = on.group != nullptr ? on.group : own_group.get();
  Stream owned_stream;
  cudaStream_t stream = owned_stream.get();
  EpcHandleConfig hc = handle_config(k.sizing, k.zero_padding ? EPC_HANDLE_ZERO_PADDING : 0);
  hc.layout = EPC_LAYOUT_EXPERT_PACKED;
  hc.expert_alignment = static_cast<uint32_t>(k.alignment);
  DeviceMemory idx, x, xs, w;
  ASSERT_TRUE(idx.allocate(sizeof(int64_t) * std::max<size_t>(1, mine.topk_idx.size()), "topk_idx"));
  ASSERT_TRUE(upload_bytes(idx.get(), mine.topk_idx.data(), sizeof(int64_t) * mine.topk_idx.size(), stream, "idx"));
  EpcTensor idx_t = make_tensor(idx.get(), EPC_DTYPE_INT64, {B, K});
  HandlePtr handle;
  ASSERT_TRUE(create_handle_with(group, hc, &idx_t, stream, handle, label));
  EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
  ASSERT_TRUE(query_handle(handle.get(), info));
  const int64_t rows = info.rows;
  const int64_t worst =
      ((int64_t{R} * shape.max_tokens * shape.max_topk) + int64_t{L} * (k.alignment - 1)) / k.alignment * k.alignment;
  EXPECT_EQ(rows, k.sizing == EPC_SIZING_EXACT ? want.rows : worst) << label;
  EXPECT_EQ(info.expert_alignment, static_cast<uint32_t>(k.alignment)) << label;

  const int row_bytes = want.row_bytes, scale_bytes = want.scale_bytes;
  const int S = H / 128;
  ASSERT_TRUE(x.allocate(std::max<size_t>(1, size_t(B) * row_bytes), "x"));
  ASSERT_TRUE(xs.allocate(std::max<size_t>(1, size_t(B) * S * 4), "x_scales"));
  ASSERT_TRUE(w.allocate(std::max<size_t>(1, mine.topk_weights.size() * 4), "w"));
  if (k.fp8) {
    ASSERT_TRUE(upload_bytes(x.get(), mine.x_fp8.data(), size_t(B) * row_bytes, stream, "x"));
    ASSERT_TRUE(upload_bytes(xs.get(), mine.fp8_scales.data(), size_t(B) * S * 4, stream, "x_scales"));
  } else {
    ASSERT_TRUE(upload_bytes(x.get(), mine.x.data(), size_t(B) * row_bytes, stream, "x"));
  }
  ASSERT_TRUE(upload_bytes(w.get(), mine.topk_weights.data(), mine.topk_weights.size() * 4, stream, "w"));
  DeviceMemory out_x, out_s, out_w, counts, offsets, num;
  ASSERT_TRUE(out_x.allocate(size_t(rows) * row_bytes, "out_x"));
  ASSERT_TRUE(out_s.allocate(size_t(rows) * S * 4 + 4, "out_scales"));
  ASSERT_TRUE(out_w.allocate(size_t(rows) * 4, "out_w"));
  ASSERT_TRUE(counts.allocate(L * 4, "counts"));
  ASSERT_TRUE(offsets.allocate((L + 1) * 8, "offsets"));
  ASSERT_TRUE(num.allocate(4, "num"));
  for (DeviceMemory* m : {&out_x, &out_s, &out_w, &counts, &offsets, &num})
    ASSERT_EQ(cudaMemsetAsync(m->get(), 0xFF, m->bytes(), stream), cudaSuccess);

  const EpcDtype xd = k.fp8 ? EPC_DTYPE_FP8_E4M3 : EPC_DTYPE_BF16;
  const EpcTensor x_t = make_tensor(x.get(), xd, {B, H}), xs_t = make_tensor(xs.get(), EPC_DTYPE_FP32, {B, S});
  const EpcTensor w_t = make_tensor(w.get(), EPC_DTYPE_FP32, {B, K});
  const EpcTensor ox_t = make_tensor(out_x.get(), xd, {rows, H}),
                  os_t = make_tensor(out_s.get(), EPC_DTYPE_FP32, {rows, S});
  const EpcTensor ow_t = make_tensor(out_w.get(), EPC_DTYPE_FP32, {rows});
  const EpcTensor c_t = make_tensor(counts.get(), EPC_DTYPE_INT32, {L});
  const EpcTensor off_t = make_tensor(offsets.get(), k.offsets_dtype, {L + 1});
  const EpcTensor n_t = make_tensor(num.get(), EPC_DTYPE_INT32, {1});
  EpcDispatchArgs da = EPC_DISPATCH_ARGS_INIT;
  da.x = &x_t;
  da.topk_weights = &w_t;
  da.out_x = &ox_t;
  da.out_topk_weights = &ow_t;
  da.out_expert_counts = &c_t;
  da.out_expert_offsets = &off_t;
  da.out_num_recv = &n_t;
  if (k.fp8) {
    da.quant = EPC_QUANT_PASSTHROUGH;
    da.x_scales = &xs_t;
    da.out_scales = &os_t;
  }
  const StepCall dispatch = [&](uint32_t flags, cudaStream_t s) {
    EpcDispatchArgs a = da;
    a.flags |= flags;
    return epc_dispatch(handle.get(), &a, s);
  };
  ASSERT_TRUE(runner.run(mode, handle.get(), stream, {dispatch})) << label;

  std::vector<uint8_t> got_x(size_t(rows) * row_bytes), got_s(size_t(rows) * S * 4);
  std::vector<float> got_w(rows);
  std::vector<int32_t> got_c(L), got_n(1);
  std::vector<uint8_t> got_off((L + 1) * 8);
  ASSERT_TRUE(download_and_wait({{got_x.data(), out_x.get(), got_x.size(), "out_x"},
                                 {got_s.data(), out_s.get(), got_s.size(), "out_scales"},
                                 {got_w.data(), out_w.get(), got_w.size() * 4, "out_w"},
                                 {got_c.data(), counts.get(), L * 4u, "counts"},
                                 {got_off.data(), offsets.get(), got_off.size(), "offsets"},
                                 {got_n.data(), num.get(), 4, "num"}},
                                stream));
  EXPECT_EQ(got_c, want.expert_counts) << label;
  EXPECT_EQ(got_n[0], want.num_recv) << label;
  for (int l = 0; l <= L; ++l) {
    const int64_t v = k.offsets_dtype == EPC_DTYPE_INT64 ? reinterpret_cast<const int64_t*>(got_off.data())[l]
                                                         : reinterpret_cast<const int32_t*>(got_off.data())[l];
    EXPECT_EQ(v, want.expert_offsets[l]) << label << " offset " << l;
  }
  // Entry rows as the model says; padding rows zero (ZERO_PADDING) or untouched (0xFF).
  std::vector<uint8_t> expect_x(got_x.begin(), got_x.begin() + int64_t{want.rows} * row_bytes);
  std::vector<uint8_t> expect_s(got_s.begin(), got_s.begin() + int64_t{want.rows} * scale_bytes);
  std::vector<float> expect_w(got_w.begin(), got_w.begin() + want.rows);
  for (int r = 0; r < want.rows; ++r) {
    const bool padding = want.src[r].src_rank < 0;
    if (padding && !k.zero_padding) {
      std::memset(expect_x.data() + int64_t{r} * row_bytes, 0xFF, row_bytes);
      if (scale_bytes > 0) std::memset(expect_s.data() + int64_t{r} * scale_bytes, 0xFF, scale_bytes);
      std::memset(&expect_w[r], 0xFF, 4);
      continue;
    }
    std::memcpy(expect_x.data() + int64_t{r} * row_bytes, want.payload.data() + int64_t{r} * row_bytes, row_bytes);
    if (scale_bytes > 0)
      std::memcpy(expect_s.data() + int64_t{r} * scale_bytes, want.scales.data() + int64_t{r} * scale_bytes,
                  scale_bytes);
    expect_w[r] = want.weights[r];
  }
  std::vector<uint8_t> got_x_used(got_x.begin(), got_x.begin() + int64_t{want.rows} * row_bytes);
  EXPECT_EQ(first_mismatch(got_x_used, expect_x, int64_t{want.rows} * row_bytes), -1) << label << " out_x";
  if (scale_bytes > 0) {
    std::vector<uint8_t> got_s_used(got_s.begin(), got_s.begin() + int64_t{want.rows} * scale_bytes);
    EXPECT_EQ(first_mismatch(got_s_used, expect_s, int64_t{want.rows} * scale_bytes), -1) << label << " out_scales";
  }
  std::vector<float> got_w_used(got_w.begin(), got_w.begin() + want.rows);
  EXPECT_EQ(std::memcmp(got_w_used.data(), expect_w.data(), expect_w.size() * 4), 0) << label << " out_topk_weights";

  // Combine: x [rows, H] (rows past the zones' NaN), weighted (default) with backward weights,
  // then as given.
  DeviceMemory cx, cg, out, out_g;
  ASSERT_TRUE(cx.allocate(size_t(rows) * H * 2, "combine x"));
  ASSERT_TRUE(cg.allocate(size_t(rows) * 4, "combine w"));
  ASSERT_TRUE(out.allocate(std::max<size_t>(1, size_t(B) * H * 2), "out"));
  ASSERT_TRUE(out_g.allocate(std::max<size_t>(1, size_t(B) * K * 4), "out_w"));
  ASSERT_EQ(cudaMemsetAsync(cx.get(), 0xFF, cx.bytes(), stream), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(cg.get(), 0xFF, cg.bytes(), stream), cudaSuccess);
  ASSERT_TRUE(upload_bytes(cx.get(), y[rank].data(), y[rank].size() * 2, stream, "combine x"));
  ASSERT_TRUE(upload_bytes(cg.get(), g[rank].data(), g[rank].size() * 4, stream, "combine w"));
  const EpcTensor cx_t = make_tensor(cx.get(), EPC_DTYPE_BF16, {rows, H});
  const EpcTensor cg_t = make_tensor(cg.get(), EPC_DTYPE_FP32, {rows});
  const EpcTensor out_t = make_tensor(out.get(), EPC_DTYPE_BF16, {B, H});
  const EpcTensor og_t = make_tensor(out_g.get(), EPC_DTYPE_FP32, {B, K});
  for (int pass = 0; pass < 2; ++pass) {
    EpcCombineArgs ca = EPC_COMBINE_ARGS_INIT;
    ca.x = &cx_t;
    ca.out = &out_t;
    if (pass == 0) {
      ca.topk_weights = &cg_t;
      ca.out_topk_weights = &og_t;
    } else {
      ca.weighting = EPC_WEIGHTING_NONE;
    }
    const StepCall combine = [&](uint32_t flags, cudaStream_t s) {
      EpcCombineArgs a = ca;
      a.flags |= flags;
      return epc_combine(handle.get(), &a, s);
    };
    ASSERT_TRUE(runner.run(mode, handle.get(), stream, {combine})) << label;
    std::vector<uint16_t> got_out(size_t(B) * H);
    std::vector<float> got_g(size_t(B) * K);
    ASSERT_TRUE(download_and_wait({{got_out.data(), out.get(), got_out.size() * 2, "out"},
                                   {got_g.data(), out_g.get(), pass == 0 ? got_g.size() * 4 : 0, "out_w"}},
                                  stream));
    const ref::HtCombineResult& wc = pass == 0 ? weighted : plain;
    EXPECT_EQ(got_out, wc.x[rank]) << label << (pass == 0 ? " combine weighted" : " combine as given");
    if (pass == 0) {
      EXPECT_EQ(got_g, weighted.topk_weights[rank]) << label << " backward weights";
    }
  }
  if (!k.per_entry) return;

  // EPC_WEIGHTING_HOME: every entry's row as given, weighted on the token's rank by weights
  // given at combine (multiples of 1/16 in [-2, 2), unlike dispatch's): into bf16 with
  // backward weights, then into fp32, which shows the fp32 sum before any rounding.
  std::vector<std::vector<float>> home(R);
  for (int q = 0; q < R; ++q) {
    for (size_t i = 0; i < p.ranks[q].topk_idx.size(); ++i)
      home[q].push_back(static_cast<float>(static_cast<int>(engine() % 64) - 32) / 16.0f);
  }
  const ref::HtCombineResult at_home = ref::ht_combine_packed_home(p, y, home, k.alignment, g);
  DeviceMemory hw, out32;
  ASSERT_TRUE(hw.allocate(std::max<size_t>(1, home[rank].size() * 4), "home weights"));
  ASSERT_TRUE(upload_bytes(hw.get(), home[rank].data(), home[rank].size() * 4, stream, "home weights"));
  ASSERT_TRUE(out32.allocate(std::max<size_t>(1, size_t(B) * H * 4), "out fp32"));
  ASSERT_EQ(cudaMemsetAsync(out_g.get(), 0xFF, out_g.bytes(), stream), cudaSuccess);
  const EpcTensor hw_t = make_tensor(hw.get(), EPC_DTYPE_FP32, {B, K});
  const EpcTensor out32_t = make_tensor(out32.get(), EPC_DTYPE_FP32, {B, H});
  for (const bool fp32 : {false, true}) {
    EpcCombineArgs ca = EPC_COMBINE_ARGS_INIT;
    ca.weighting = EPC_WEIGHTING_HOME;
    ca.x = &cx_t;
    ca.home_topk_weights = &hw_t;
    ca.out = fp32 ? &out32_t : &out_t;
    if (!fp32) {
      ca.topk_weights = &cg_t;
      ca.out_topk_weights = &og_t;
    }
    const StepCall combine = [&](uint32_t flags, cudaStream_t s) {
      EpcCombineArgs a = ca;
      a.flags |= flags;
      return epc_combine(handle.get(), &a, s);
    };
    ASSERT_TRUE(runner.run(mode, handle.get(), stream, {combine})) << label << " home";
    if (fp32) {
      std::vector<float> got_sums(size_t(B) * H);
      ASSERT_TRUE(download_and_wait({{got_sums.data(), out32.get(), got_sums.size() * 4, "out fp32"}}, stream));
      EXPECT_EQ(std::memcmp(got_sums.data(), at_home.sums[rank].data(), got_sums.size() * 4), 0)
          << label << " combine at home, fp32";
      continue;
    }
    std::vector<uint16_t> got_out(size_t(B) * H);
    std::vector<float> got_g(size_t(B) * K);
    ASSERT_TRUE(download_and_wait({{got_out.data(), out.get(), got_out.size() * 2, "out"},
                                   {got_g.data(), out_g.get(), got_g.size() * 4, "out_w"}},
                                  stream));
    EXPECT_EQ(got_out, at_home.x[rank]) << label << " combine at home";
    EXPECT_EQ(got_g, at_home.topk_weights[rank]) << label << " backward weights at home";
  }
}

TEST(HighThroughputPacked, MatchesTheReference) {
  const PackedCase cases[] = {
      // alignment, zero padding, sizing, fp8, offsets dtype, per-entry window
      {1, false, EPC_SIZING_EXACT, false, EPC_DTYPE_INT32, false},       // bf16, no alignment
      {128, true, EPC_SIZING_EXACT, false, EPC_DTYPE_INT64, false},      // DeepGEMM's alignment, zeroed
      {128, false, EPC_SIZING_CAPACITY, false, EPC_DTYPE_INT32, false},  // default capacity
      {7, true, EPC_SIZING_CAPACITY, true, EPC_DTYPE_INT64, false},      // fp8, odd alignment
      {16, false, EPC_SIZING_EXACT, true, EPC_DTYPE_INT32, false},       // fp8
      {1, false, EPC_SIZING_EXACT, false, EPC_DTYPE_INT32, true},        // bf16, weights at home
      {128, true, EPC_SIZING_CAPACITY, true, EPC_DTYPE_INT64, true},     // fp8, weights at home
      // Top-k at most the rank count (1 on one rank; 2 from two ranks): combine as given sums
      // a token's one row on a rank as it stands (HtCombineParams::lone_rows).
      {1, false, EPC_SIZING_EXACT, false, EPC_DTYPE_INT32, false, 1},
      {128, false, EPC_SIZING_CAPACITY, false, EPC_DTYPE_INT64, false, 2},
  };
  SplitRunner runner;
  ASSERT_TRUE(runner.status());
  uint64_t seed = 31000;
  for (const PackedCase& k : cases) run_case(k, seed++, SplitMode::kFused, runner);
}

// An HT group of `shape` split into virtual nodes of `node_size` ranks, with EpcGroupConfig.flags
// `group_flags`.
::testing::AssertionResult create_split_group(const HtShape& shape, int node_size, GroupPtr& out,
                                              uint32_t group_flags = 0) {
  EpcGroupConfig config = group_config(shape, EPC_MODE_HIGH_THROUGHPUT);
  config.virtual_node_size = static_cast<uint32_t>(node_size);
  config.flags = group_flags;
  EpcGroup* raw = nullptr;
  ::testing::AssertionResult created =
      epc_ok(epc_group_create(context().comm, &config, &raw), "epc_group_create with virtual nodes");
  if (created) out.reset(raw);
  return created;
}

// Across nodes a token crosses to another node once, to its rail peer there, with each
// entry's place among its source's entries for the rank hosting its expert; the rail peer
// forwards it into the ranks of its node as the source would, so the zones are those of one
// node. Combine sums a token's rows on a rank into one partial, and another node's partials
// into one on the token's rail peer there (ref::ht_combine_packed with the node size). Node
// sizes 1 (on 2 ranks) and 2 (on 4 ranks); bf16 and fp8 (passthrough) payloads, alignments
// 1, 7 and 128, padding zeroed and left alone, EXACT and CAPACITY, top-8 and (the lone-row
// kernels) top-1 and top-2: one step after another on one group per node size.
TEST(HighThroughputPacked, AcrossVirtualNodesMatchesTheReference) {
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  const PackedCase cases[] = {
      // alignment, zero padding, sizing, fp8, offsets dtype, per-entry window
      {1, false, EPC_SIZING_EXACT, false, EPC_DTYPE_INT32, false},      // bf16, no alignment
      {128, true, EPC_SIZING_CAPACITY, false, EPC_DTYPE_INT64, false},  // DeepGEMM's alignment, zeroed
      {7, true, EPC_SIZING_EXACT, true, EPC_DTYPE_INT64, false},        // fp8, odd alignment, zeroed
      {128, false, EPC_SIZING_CAPACITY, true, EPC_DTYPE_INT32, false},  // fp8, padding left alone
      {7, false, EPC_SIZING_CAPACITY, false, EPC_DTYPE_INT32, false},   // bf16, padding left alone
      {1, true, EPC_SIZING_EXACT, true, EPC_DTYPE_INT32, false},        // fp8, no alignment
      // Top-k at most the rank count: a rank returns a token's one row there as its partial,
      // to the token's rank or to its rail peer, which reduces its node's partials with it.
      {1, false, EPC_SIZING_EXACT, false, EPC_DTYPE_INT32, false, 1},
      {128, true, EPC_SIZING_CAPACITY, true, EPC_DTYPE_INT64, false, 1},
      {7, false, EPC_SIZING_EXACT, false, EPC_DTYPE_INT64, false, 2},
  };
  SplitRunner runner;
  ASSERT_TRUE(runner.status());
  for (int node_size : sizes) {
    GroupPtr group;
    ASSERT_TRUE(create_split_group(world_shape(8, 2048, 128, 8), node_size, group)) << "nodes of " << node_size;
    uint64_t seed = 31200 + 100 * static_cast<uint64_t>(node_size);
    for (const PackedCase& k : cases) run_case(k, seed++, SplitMode::kFused, runner, {group.get(), node_size});
  }
}

// The same across nodes with steps in parts (EPCOMM_HT_PART_TOKENS, core/ht/ht_parts.hpp):
// parts of 48 tokens on T = 128 (three parts, the last of 32), the whole step's zones placed
// from each part's (kernels/ht/ht_parts.cu): bf16 and fp8, alignments 1, 7 and 128, padding
// zeroed and left alone, EXACT and CAPACITY, top-8 and the lone-row top-1; then weights at
// home on a per-entry group in parts of 40.
TEST(HighThroughputPacked, AcrossVirtualNodesInPartsMatchesTheReference) {
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  const PackedCase cases[] = {
      // alignment, zero padding, sizing, fp8, offsets dtype, per-entry window
      {1, false, EPC_SIZING_EXACT, false, EPC_DTYPE_INT32, false},
      {128, true, EPC_SIZING_CAPACITY, false, EPC_DTYPE_INT64, false},
      {7, true, EPC_SIZING_EXACT, true, EPC_DTYPE_INT64, false},
      {7, false, EPC_SIZING_CAPACITY, false, EPC_DTYPE_INT32, false, 1},
  };
  const PackedCase home[] = {
      {1, false, EPC_SIZING_EXACT, false, EPC_DTYPE_INT32, true},
      {128, true, EPC_SIZING_CAPACITY, true, EPC_DTYPE_INT64, true},
  };
  SplitRunner runner;
  ASSERT_TRUE(runner.status());
  for (int node_size : sizes) {
    GroupPtr group, per_entry;
    {
      const test::ScopedEnv parts("EPCOMM_HT_PART_TOKENS", "48");
      ASSERT_TRUE(create_split_group(world_shape(8, 2048, 128, 8), node_size, group)) << "nodes of " << node_size;
    }
    {
      const test::ScopedEnv parts("EPCOMM_HT_PART_TOKENS", "40");
      ASSERT_TRUE(create_split_group(world_shape(8, 2048, 128, 8), node_size, per_entry, EPC_GROUP_COMBINE_PER_ENTRY))
          << "nodes of " << node_size;
    }
    uint64_t seed = 31900 + 100 * static_cast<uint64_t>(node_size);
    for (const PackedCase& k : cases) run_case(k, seed++, SplitMode::kFused, runner, {group.get(), node_size});
    for (const PackedCase& k : home) run_case(k, seed++, SplitMode::kFused, runner, {per_entry.get(), node_size});
  }
}

// EPC_WEIGHTING_HOME across nodes (groups with EPC_GROUP_COMBINE_PER_ENTRY): a sender
// returns a remote source's entry rows to the source's rail peer in its node, which forwards
// each unreduced into the token's rank's per-entry slots; the token's rank sums them as on
// one node (ref::ht_combine_packed_home), into bf16 with backward weights and into fp32.
// The same group also combines with SENDER and NONE weighting (the node order), each case
// after its own dispatch; cases one after another on a group per split.
TEST(HighThroughputPacked, WeightsAtHomeAcrossVirtualNodesMatchTheReference) {
  const std::vector<int> sizes = split_node_sizes();
  if (sizes.empty()) GTEST_SKIP() << "needs at least 2 ranks";
  const PackedCase cases[] = {
      // alignment, zero padding, sizing, fp8, offsets dtype, per-entry window
      {1, false, EPC_SIZING_EXACT, false, EPC_DTYPE_INT32, true},     // bf16, no alignment
      {128, true, EPC_SIZING_CAPACITY, true, EPC_DTYPE_INT64, true},  // fp8, zeroed padding
      {7, false, EPC_SIZING_CAPACITY, false, EPC_DTYPE_INT32, true},  // bf16, padding left alone
  };
  SplitRunner runner;
  ASSERT_TRUE(runner.status());
  for (int node_size : sizes) {
    GroupPtr group;
    ASSERT_TRUE(create_split_group(world_shape(8, 2048, 128, 8), node_size, group, EPC_GROUP_COMBINE_PER_ENTRY))
        << "nodes of " << node_size;
    uint64_t seed = 31700 + 100 * static_cast<uint64_t>(node_size);
    for (const PackedCase& k : cases) run_case(k, seed++, SplitMode::kFused, runner, {group.get(), node_size});
  }
}

// The send-only halves and epc_complete, on one stream, on two joined by events, and in a
// CUDA graph, give the reference model's bits as the fused calls do.
TEST(HighThroughputPacked, SendOnlyAndCompleteMatchTheReference) {
  const PackedCase cases[] = {
      {128, true, EPC_SIZING_EXACT, false, EPC_DTYPE_INT64, true},        // bf16, zeroed padding, at home
      {7, false, EPC_SIZING_CAPACITY, true, EPC_DTYPE_INT32, false},      // fp8, padding left alone
      {7, false, EPC_SIZING_CAPACITY, true, EPC_DTYPE_INT32, true},       // fp8, weights at home
      {1, false, EPC_SIZING_CAPACITY, false, EPC_DTYPE_INT32, false, 1},  // the lone-row kernels
  };
  SplitRunner runner;
  ASSERT_TRUE(runner.status());
  uint64_t seed = 31100;
  for (SplitMode mode : {SplitMode::kSameStream, SplitMode::kSecondStream, SplitMode::kGraph}) {
    for (const PackedCase& k : cases) run_case(k, seed++, mode, runner);
  }
}

}  // namespace
}  // namespace epc::gputest::ht
