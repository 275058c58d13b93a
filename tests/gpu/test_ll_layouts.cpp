// SPDX-License-Identifier: Apache-2.0
// The low-latency token layouts (EPC_LAYOUT_RANK_MAJOR, EPC_LAYOUT_FLAT) against the reference
// model (tests/reference/reference_ll_tokens.hpp), bit for bit: every received row's payload
// (bf16, or the fp8 cast and its scales), its slots' expert ids (local or global) and
// weights, the counts each layout reports, and that no other row of any output is written
// (outputs start as 0xFF poison); then combine of caller-weighted rows, summed in ascending
// rank order. Fused and send-only + epc_complete, and a CUDA graph replay. Routing has B < T
// on some ranks, masked entries and duplicate expert ids.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/gpu/gpu_case_common.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/harness/scoped_env.hpp"
#include "tests/reference/problem_gen.hpp"
#include "tests/reference/reference.hpp"
#include "tests/reference/reference_ll_tokens.hpp"

namespace epc::gputest {
namespace {

constexpr uint8_t kPoison = 0xFF;

struct LayoutRun {
  EpcLayout layout = EPC_LAYOUT_FLAT;
  bool fp8 = false;
  bool global_ids = false;
  uint32_t flags = 0;  // EPC_STEP_SEND_ONLY for both steps
  bool graph = false;  // capture dispatch + combine once, replay twice
};

ref::LlTokenLayout ref_layout(EpcLayout layout) {
  return layout == EPC_LAYOUT_RANK_MAJOR ? ref::LlTokenLayout::kRankMajor : ref::LlTokenLayout::kFlat;
}

std::string label_of(const LayoutRun& r) {
  return std::string(r.layout == EPC_LAYOUT_RANK_MAJOR ? "RANK_MAJOR" : "FLAT") + (r.fp8 ? " fp8" : " bf16") +
         (r.global_ids ? " global ids" : "") + (r.flags & EPC_STEP_SEND_ONLY ? " send-only" : " fused") +
         (r.graph ? " graph" : "");
}

// Combine input of rank q: bf16 rows drawn from (seed, q, row) on the rows q received, NaN
// (0x7FC1) on the others, which no output may contain.
std::vector<std::vector<uint16_t>> combine_inputs(const std::vector<ref::LlTokenResult>& received, int hidden,
                                                  uint64_t seed) {
  std::vector<std::vector<uint16_t>> x;
  for (std::size_t q = 0; q < received.size(); ++q) {
    const ref::LlTokenResult& r = received[q];
    std::vector<uint16_t> rows(static_cast<std::size_t>(r.rows) * hidden, 0x7FC1);
    for (int i = 0; i < r.rows; ++i) {
      if (!r.written[i]) continue;
      for (int c = 0; c < hidden; ++c) {
        uint64_t h = seed * 0x9E3779B97F4A7C15ull + q * 0x100000001B3ull + static_cast<uint64_t>(i) * hidden + c;
        h ^= h >> 29;
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 32;
        const float v = static_cast<float>(h % 4096) / 1024.0f - 2.0f;
        rows[static_cast<std::size_t>(i) * hidden + c] = ref::float_to_bf16(v);
      }
    }
    x.push_back(std::move(rows));
  }
  return x;
}

template <typename T>
int first_mismatch(const std::vector<T>& got, const std::vector<T>& want) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) return static_cast<int>(i);
  }
  return -1;
}

// The bytes of out_x, the scales and the slot outputs the reference gives for this rank, with
// the poison everywhere the step must not write.
struct Expected {
  std::vector<uint8_t> x, scales;
  std::vector<int32_t> idx;
  std::vector<float> weights;
};

Expected expected_outputs(const ref::LlTokenResult& want, const Shape& shape, int topk, bool fp8) {
  const std::size_t rows = static_cast<std::size_t>(want.rows), H = static_cast<std::size_t>(shape.hidden);
  const std::size_t row_bytes = fp8 ? H : 2 * H, S = H / 128;
  Expected e;
  e.x.assign(rows * row_bytes, kPoison);
  e.scales.assign(fp8 ? rows * S * 4 : 0, kPoison);
  int32_t poison_idx;
  float poison_weight;
  std::memset(&poison_idx, kPoison, 4);
  std::memset(&poison_weight, kPoison, 4);
  e.idx.assign(rows * topk, poison_idx);
  e.weights.assign(rows * topk, poison_weight);
  for (std::size_t i = 0; i < rows; ++i) {
    if (!want.written[i]) continue;
    if (fp8) {
      std::memcpy(&e.x[i * row_bytes], &want.x_fp8[i * H], H);
      std::memcpy(&e.scales[i * S * 4], &want.fp8_scales[i * S], S * 4);
    } else {
      std::memcpy(&e.x[i * row_bytes], &want.x[i * H], 2 * H);
    }
    for (int k = 0; k < topk; ++k) {
      e.idx[i * topk + k] = want.recv_topk_idx[i * topk + k];
      e.weights[i * topk + k] = want.recv_topk_weights[i * topk + k];
    }
  }
  return e;
}

void run_layout(EpcGroup* group, const Shape& shape, const ref::Problem& problem, const LayoutRun& run, uint64_t seed) {
  const std::string label = "LL " + label_of(run);
  const int me = my_rank(), K = problem.topk, R = shape.nranks, T = shape.max_tokens, H = shape.hidden;
  const int L = shape.local_experts(), B = problem.ranks[me].num_tokens, S = H / 128;
  const int64_t rows = static_cast<int64_t>(R) * T;
  ref::LlTokenOptions o;
  o.layout = ref_layout(run.layout);
  o.use_fp8 = run.fp8;
  o.global_expert_ids = run.global_ids;
  const std::vector<ref::LlTokenResult> received = ref::ll_dispatch_tokens(problem, o);
  const ref::LlTokenResult& want = received[me];
  const std::vector<std::vector<uint16_t>> y = combine_inputs(received, H, seed);
  const std::vector<uint16_t> want_out = ref::ll_combine_tokens(problem, y, o.layout)[me];
  const Expected e = expected_outputs(want, shape, K, run.fp8);

  Stream stream;
  ASSERT_TRUE(stream.status());
  const ref::RankTokens& mine = problem.ranks[me];
  const std::size_t row_bytes = run.fp8 ? H : 2 * static_cast<std::size_t>(H);
  DeviceMemory x, idx, weights, out_x, scales, out_idx, out_weights, counts, expert_out, out;
  ASSERT_TRUE(x.allocate(static_cast<std::size_t>(T) * H * 2, "x"));
  ASSERT_TRUE(idx.allocate(static_cast<std::size_t>(T) * K * 8, "topk_idx"));
  ASSERT_TRUE(weights.allocate(static_cast<std::size_t>(T) * K * 4, "topk_weights"));
  ASSERT_TRUE(out_x.allocate(rows * row_bytes, "out_x"));
  ASSERT_TRUE(scales.allocate(static_cast<std::size_t>(rows) * S * 4, "out_scales"));
  ASSERT_TRUE(out_idx.allocate(static_cast<std::size_t>(rows) * K * 4, "out_topk_idx"));
  ASSERT_TRUE(out_weights.allocate(static_cast<std::size_t>(rows) * K * 4, "out_topk_weights"));
  ASSERT_TRUE(counts.allocate(static_cast<std::size_t>(L + R + 1) * 4, "counts"));
  ASSERT_TRUE(expert_out.allocate(static_cast<std::size_t>(rows) * H * 2, "expert outputs"));
  ASSERT_TRUE(out.allocate(static_cast<std::size_t>(T) * H * 2, "out"));
  ASSERT_TRUE(upload_bytes(x.get(), mine.x.data(), mine.x.size() * 2, stream.get(), "x"));
  ASSERT_TRUE(upload_bytes(idx.get(), mine.topk_idx.data(), mine.topk_idx.size() * 8, stream.get(), "topk_idx"));
  ASSERT_TRUE(upload_bytes(weights.get(), mine.topk_weights.data(), mine.topk_weights.size() * 4, stream.get(),
                           "topk_weights"));
  ASSERT_TRUE(upload_bytes(expert_out.get(), y[me].data(), y[me].size() * 2, stream.get(), "expert outputs"));

  const bool rank_major = run.layout == EPC_LAYOUT_RANK_MAJOR;
  const EpcTensor t_x = make_tensor(x.get(), EPC_DTYPE_BF16, {B, H});
  const EpcTensor t_idx = make_tensor(idx.get(), EPC_DTYPE_INT64, {B, K});
  const EpcTensor t_w = make_tensor(weights.get(), EPC_DTYPE_FP32, {B, K});
  const EpcDtype out_dtype = run.fp8 ? EPC_DTYPE_FP8_E4M3 : EPC_DTYPE_BF16;
  const EpcTensor t_out_x =
      rank_major ? make_tensor(out_x.get(), out_dtype, {R, T, H}) : make_tensor(out_x.get(), out_dtype, {rows, H});
  const EpcTensor t_scales = rank_major ? make_tensor(scales.get(), EPC_DTYPE_FP32, {R, T, S})
                                        : make_tensor(scales.get(), EPC_DTYPE_FP32, {rows, S});
  const EpcTensor t_out_idx = rank_major ? make_tensor(out_idx.get(), EPC_DTYPE_INT32, {R, T, K})
                                         : make_tensor(out_idx.get(), EPC_DTYPE_INT32, {rows, K});
  const EpcTensor t_out_w = rank_major ? make_tensor(out_weights.get(), EPC_DTYPE_FP32, {R, T, K})
                                       : make_tensor(out_weights.get(), EPC_DTYPE_FP32, {rows, K});
  int32_t* counts_at = static_cast<int32_t*>(counts.get());
  const EpcTensor t_expert_counts = make_tensor(counts_at, EPC_DTYPE_INT32, {L});
  const EpcTensor t_rank_counts = make_tensor(counts_at + L, EPC_DTYPE_INT32, {R});
  const EpcTensor t_num_recv = make_tensor(counts_at + L + R, EPC_DTYPE_INT32, {1});
  const EpcTensor t_expert_out = rank_major ? make_tensor(expert_out.get(), EPC_DTYPE_BF16, {R, T, H})
                                            : make_tensor(expert_out.get(), EPC_DTYPE_BF16, {rows, H});
  const EpcTensor t_out = make_tensor(out.get(), EPC_DTYPE_BF16, {B, H});

  EpcHandleConfig config = EPC_HANDLE_CONFIG_INIT;
  config.layout = run.layout;
  config.flags = run.global_ids ? EPC_HANDLE_GLOBAL_EXPERT_IDS : 0u;
  HandlePtr handle;
  ASSERT_TRUE(create_handle_with(group, config, &t_idx, stream.get(), handle, label + ": epc_handle_create"));

  EpcDispatchArgs d = EPC_DISPATCH_ARGS_INIT;
  d.flags = run.flags;
  d.quant = run.fp8 ? EPC_QUANT_FP8 : EPC_QUANT_NONE;
  d.x = &t_x;
  d.topk_weights = &t_w;
  d.out_x = &t_out_x;
  d.out_scales = run.fp8 ? &t_scales : nullptr;
  d.out_topk_idx = &t_out_idx;
  d.out_topk_weights = &t_out_w;
  if (rank_major) {
    d.out_rank_counts = &t_rank_counts;
  } else {
    d.out_expert_counts = &t_expert_counts;
    d.out_num_recv = &t_num_recv;
  }
  EpcCombineArgs cmb = EPC_COMBINE_ARGS_INIT;
  cmb.flags = run.flags;
  cmb.x = &t_expert_out;
  cmb.out = &t_out;
  auto step = [&]() -> ::testing::AssertionResult {
    if (!epc_ok(epc_dispatch(handle.get(), &d, stream.get()), label + ": epc_dispatch"))
      return ::testing::AssertionFailure() << label << ": epc_dispatch failed";
    if ((run.flags & EPC_STEP_SEND_ONLY) && !epc_ok(epc_complete(handle.get(), 0, stream.get()), label))
      return ::testing::AssertionFailure() << label << ": epc_complete (dispatch) failed";
    if (!epc_ok(epc_combine(handle.get(), &cmb, stream.get()), label + ": epc_combine"))
      return ::testing::AssertionFailure() << label << ": epc_combine failed";
    if ((run.flags & EPC_STEP_SEND_ONLY) && !epc_ok(epc_complete(handle.get(), 0, stream.get()), label))
      return ::testing::AssertionFailure() << label << ": epc_complete (combine) failed";
    return ::testing::AssertionSuccess();
  };
  auto poison = [&]() {
    for (DeviceMemory* m : {&out_x, &scales, &out_idx, &out_weights, &counts, &out}) {
      ASSERT_EQ(cudaMemsetAsync(m->get(), kPoison, m->bytes(), stream.get()), cudaSuccess);
    }
  };
  auto check = [&](const std::string& what) {
    std::vector<uint8_t> got_x(e.x.size()), got_scales(e.scales.size());
    std::vector<int32_t> got_idx(e.idx.size()), got_counts(static_cast<std::size_t>(L + R + 1));
    std::vector<float> got_w(e.weights.size());
    std::vector<uint16_t> got_out(static_cast<std::size_t>(B) * H);
    ASSERT_TRUE(download_and_wait({{got_x.data(), out_x.get(), got_x.size(), "out_x"},
                                   {got_scales.data(), scales.get(), got_scales.size(), "out_scales"},
                                   {got_idx.data(), out_idx.get(), got_idx.size() * 4, "out_topk_idx"},
                                   {got_w.data(), out_weights.get(), got_w.size() * 4, "out_topk_weights"},
                                   {got_counts.data(), counts.get(), got_counts.size() * 4, "counts"},
                                   {got_out.data(), out.get(), got_out.size() * 2, "out"}},
                                  stream.get()));
    const std::string at = label + " (" + what + ")";
    EXPECT_EQ(first_mismatch(got_x, e.x), -1) << at << ": out_x byte (row bytes " << row_bytes << ")";
    EXPECT_EQ(first_mismatch(got_scales, e.scales), -1) << at << ": out_scales byte";
    EXPECT_EQ(first_mismatch(got_idx, e.idx), -1) << at << ": out_topk_idx element";
    EXPECT_EQ(first_mismatch(got_w, e.weights), -1) << at << ": out_topk_weights element";
    if (rank_major) {
      EXPECT_EQ(std::vector<int32_t>(got_counts.begin() + L, got_counts.begin() + L + R), want.rank_counts) << at;
    } else {
      EXPECT_EQ(std::vector<int32_t>(got_counts.begin(), got_counts.begin() + L), want.expert_counts) << at;
      EXPECT_EQ(got_counts[static_cast<std::size_t>(L + R)], want.num_recv) << at;
    }
    EXPECT_EQ(first_mismatch(got_out, want_out), -1) << at << ": combine out element";
  };

  poison();
  ASSERT_TRUE(step());
  check("eager");
  if (!run.graph) return;
  GraphExecPtr exec;
  ASSERT_TRUE(capture_on_every_rank(stream.get(), step, exec));
  for (int replay = 1; replay <= 2; ++replay) {
    poison();
    ASSERT_TRUE(cuda_ok(cudaGraphLaunch(exec.get(), stream.get()), "cudaGraphLaunch"));
    check("graph replay " + std::to_string(replay));
  }
}

ref::Problem layout_problem(const Shape& shape, int topk, uint64_t seed, bool duplicates) {
  ref::ProblemGenOptions o = gen_options(shape, topk, seed);
  o.random_token_counts = true;
  o.masked_fraction = 0.25;
  o.allow_duplicate_experts = duplicates;
  return ref::make_random_problem(o);
}

// hidden 1024: eight 128-channel scale blocks; T 24 with B drawn in [0, T]. Twice: with the
// default line records (a rank of at most 16 tokens takes its combine partials back as line
// records) and on a line group (EPCOMM_LL_LINE_TOKENS 24: every dispatch and combine moves as
// line records, kernels/wire/ll_message.hpp).
TEST(LowLatencyLayouts, RankMajorAndFlatMatchTheReference) {
  const Shape shape = world_shape(16, 1024, 24, 8);
  for (const char* lines : {"16", "24"}) {
    SCOPED_TRACE(std::string("EPCOMM_LL_LINE_TOKENS=") + lines);
    GroupPtr group;
    {
      const test::ScopedEnv env("EPCOMM_LL_LINE_TOKENS", lines);
      ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
    }
    uint64_t seed = 23000;
    for (EpcLayout layout : {EPC_LAYOUT_RANK_MAJOR, EPC_LAYOUT_FLAT}) {
      for (bool fp8 : {false, true}) {
        for (uint32_t flags : {0u, static_cast<uint32_t>(EPC_STEP_SEND_ONLY)}) {
          LayoutRun run;
          run.layout = layout;
          run.fp8 = fp8;
          run.flags = flags;
          run.global_ids = fp8;
          const ref::Problem p = layout_problem(shape, 6, seed, flags != 0);
          run_layout(group.get(), shape, p, run, seed + 1);
          seed += 10;
        }
      }
    }
  }
}

// The step captured once and replayed; a batch of every token and one of none.
TEST(LowLatencyLayouts, GraphReplayAndEdgeBatches) {
  const Shape shape = world_shape(16, 1024, 24, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  for (EpcLayout layout : {EPC_LAYOUT_RANK_MAJOR, EPC_LAYOUT_FLAT}) {
    LayoutRun run;
    run.layout = layout;
    run.graph = true;
    run_layout(group.get(), shape, layout_problem(shape, 8, 23500, true), run, 23501);
    ref::ProblemGenOptions full = gen_options(shape, 8, 23600);
    run.graph = false;
    run_layout(group.get(), shape, ref::make_random_problem(full), run, 23601);
    ref::Problem empty = ref::make_random_problem(full);
    for (ref::RankTokens& r : empty.ranks) r = ref::RankTokens{};
    run_layout(group.get(), shape, empty, run, 23701);
  }
}

}  // namespace
}  // namespace epc::gputest
