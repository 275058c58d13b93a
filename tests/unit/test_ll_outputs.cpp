// SPDX-License-Identifier: Apache-2.0
// The low-latency layouts' tensor checks before any GPU work (core/ll/ll_outputs.cpp): out_x
// and combine's x per layout, the received top-k ids and weights and the counts each layout
// has a column for (epcomm.h's EpcLayout table), the fp8 scales, the passthrough payload
// (core/passthrough.cpp: x, x_scales, x_global_scale; out_x, out_scales; the message limit),
// and the combine weighting;
// each refusal names the field and returns the status the ABI's rule gives. The data
// pointers are never dereferenced.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.hpp"
#include "core/ll/ll_outputs.hpp"
#include "core/passthrough.hpp"
#include "core/step_args.hpp"
#include "tests/unit/error_outcome.hpp"

namespace {

void* const kDevice = reinterpret_cast<void*>(uintptr_t{0x7f0000000000});

// R = 4, T = 16, H = 256, L = 8, B = 10, K = 4.
epc::LlShape shape() {
  epc::LlShape s;
  s.ranks = 4;
  s.max_tokens = 16;
  s.hidden = 256;
  s.local_experts = 8;
  s.tokens = 10;
  s.topk = 4;
  return s;
}

epc::HandleSetup setup(EpcLayout layout) {
  epc::HandleSetup s;
  s.layout = layout;
  s.capacity = 4 * 16;
  return s;
}

EpcTensor tensor(EpcDtype dtype, std::initializer_list<int64_t> extents) {
  EpcTensor t{kDevice, dtype, static_cast<int32_t>(extents.size()), {0, 0, 0, 0}, {0, 0, 0, 0}};
  int i = 0;
  for (int64_t e : extents) t.shape[i++] = e;
  return t;
}

using epc::test::expect_outcome;
using epc::test::Outcome;
using epc::test::run;

// A dispatch's tensors, valid for `layout` with bf16 payload and no optional output.
struct Dispatch {
  EpcTensor x = tensor(EPC_DTYPE_BF16, {10, 256});
  EpcTensor weights = tensor(EPC_DTYPE_FP32, {10, 4});
  EpcTensor out_x;
  EpcDispatchArgs args = EPC_DISPATCH_ARGS_INIT;

  explicit Dispatch(EpcLayout layout) {
    out_x = layout == EPC_LAYOUT_RANK_MAJOR ? tensor(EPC_DTYPE_BF16, {4, 16, 256})
            : layout == EPC_LAYOUT_FLAT     ? tensor(EPC_DTYPE_BF16, {64, 256})
                                            : tensor(EPC_DTYPE_BF16, {8, 64, 256});
    args.x = &x;
    args.topk_weights = &weights;
    args.out_x = &out_x;
  }
  Outcome check(EpcLayout layout) const {
    return run([&] { epc::check_ll_dispatch_outputs(args, setup(layout), shape()); });
  }
};

TEST(LlOutputs, OutXHasTheLayoutsShape) {
  for (EpcLayout layout : {EPC_LAYOUT_EXPERT_PADDED, EPC_LAYOUT_RANK_MAJOR, EPC_LAYOUT_FLAT}) {
    Dispatch d(layout);
    EXPECT_EQ(d.check(layout).status, EPC_OK) << layout;
  }
  // Another layout's out_x is refused, naming the field.
  Dispatch d(EPC_LAYOUT_FLAT);
  expect_outcome(d.check(EPC_LAYOUT_RANK_MAJOR), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_x"},
                 "FLAT out_x on RANK_MAJOR");
  expect_outcome(d.check(EPC_LAYOUT_EXPERT_PADDED), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_x"},
                 "FLAT out_x on EXPERT_PADDED");
}

TEST(LlOutputs, TopkWeightsAreRequiredByOutTopkWeightsOnly) {
  Dispatch flat(EPC_LAYOUT_FLAT);
  flat.args.topk_weights = nullptr;
  EXPECT_EQ(flat.check(EPC_LAYOUT_FLAT).status, EPC_OK);
  EpcTensor w = tensor(EPC_DTYPE_FP32, {64, 4});
  flat.args.out_topk_weights = &w;
  expect_outcome(flat.check(EPC_LAYOUT_FLAT), EPC_ERR_INVALID_ARGUMENT,
                 {"EpcDispatchArgs.topk_weights", "out_topk_weights"}, "out_topk_weights without weights");
  // EXPERT_PADDED takes them for a SENDER combine, which the handle refuses after a dispatch
  // without them (EPC_WEIGHTING_HOME weights at combine instead).
  Dispatch padded(EPC_LAYOUT_EXPERT_PADDED);
  padded.args.topk_weights = nullptr;
  EXPECT_EQ(padded.check(EPC_LAYOUT_EXPERT_PADDED).status, EPC_OK);
}

TEST(LlOutputs, RankMajorServesIdsWeightsAndRankCounts) {
  Dispatch d(EPC_LAYOUT_RANK_MAJOR);
  EpcTensor idx = tensor(EPC_DTYPE_INT32, {4, 16, 4});
  EpcTensor w = tensor(EPC_DTYPE_FP32, {4, 16, 4});
  EpcTensor ranks = tensor(EPC_DTYPE_INT32, {4});
  d.args.out_topk_idx = &idx;
  d.args.out_topk_weights = &w;
  d.args.out_rank_counts = &ranks;
  epc::LlOutputs out;
  const Outcome o = run([&] { out = epc::check_ll_dispatch_outputs(d.args, setup(EPC_LAYOUT_RANK_MAJOR), shape()); });
  ASSERT_EQ(o.status, EPC_OK) << o.message;
  EXPECT_EQ(out.topk_idx, kDevice);
  EXPECT_EQ(out.topk_weights, kDevice);
  EXPECT_EQ(out.rank_counts, kDevice);
  EXPECT_EQ(out.num_recv, nullptr);
  // FLAT's [rows, K] ids are the wrong shape here.
  EpcTensor flat_idx = tensor(EPC_DTYPE_INT32, {64, 4});
  d.args.out_topk_idx = &flat_idx;
  expect_outcome(d.check(EPC_LAYOUT_RANK_MAJOR), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_topk_idx"},
                 "[rows, K] ids on RANK_MAJOR");
  d.args.out_topk_idx = &idx;
  EpcTensor idx64 = tensor(EPC_DTYPE_INT64, {4, 16, 4});
  d.args.out_topk_idx = &idx64;
  expect_outcome(d.check(EPC_LAYOUT_RANK_MAJOR), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_topk_idx"},
                 "int64 ids");
}

TEST(LlOutputs, FlatServesIdsWeightsExpertCountsAndNumRecv) {
  Dispatch d(EPC_LAYOUT_FLAT);
  EpcTensor idx = tensor(EPC_DTYPE_INT32, {64, 4});
  EpcTensor w = tensor(EPC_DTYPE_FP32, {64, 4});
  EpcTensor counts = tensor(EPC_DTYPE_INT32, {8});
  EpcTensor num = tensor(EPC_DTYPE_INT32, {1});
  d.args.out_topk_idx = &idx;
  d.args.out_topk_weights = &w;
  d.args.out_expert_counts = &counts;
  d.args.out_num_recv = &num;
  epc::LlOutputs out;
  const Outcome o = run([&] { out = epc::check_ll_dispatch_outputs(d.args, setup(EPC_LAYOUT_FLAT), shape()); });
  ASSERT_EQ(o.status, EPC_OK) << o.message;
  EXPECT_EQ(out.num_recv, kDevice);
  EXPECT_EQ(out.rank_counts, nullptr);
  EpcTensor two = tensor(EPC_DTYPE_INT32, {2});
  d.args.out_num_recv = &two;
  expect_outcome(d.check(EPC_LAYOUT_FLAT), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_num_recv"}, "[2] num_recv");
}

// An output a layout has no column for is INVALID_ARGUMENT naming it; EXPERT_PADDED's
// per-row weights are defined but not served (UNSUPPORTED).
TEST(LlOutputs, OutputsWithoutAColumnAreRefusedNamingTheField) {
  EpcTensor r = tensor(EPC_DTYPE_INT32, {4});
  EpcTensor one = tensor(EPC_DTYPE_INT32, {1});
  EpcTensor l = tensor(EPC_DTYPE_INT32, {8});
  EpcTensor offsets = tensor(EPC_DTYPE_INT32, {9});
  struct Case {
    EpcLayout layout;
    const EpcTensor* EpcDispatchArgs::* field;
    const EpcTensor* tensor;
    const char* name;
  };
  const Case cases[] = {
      {EPC_LAYOUT_FLAT, &EpcDispatchArgs::out_rank_counts, &r, "out_rank_counts"},
      {EPC_LAYOUT_FLAT, &EpcDispatchArgs::out_expert_offsets, &offsets, "out_expert_offsets"},
      {EPC_LAYOUT_RANK_MAJOR, &EpcDispatchArgs::out_num_recv, &one, "out_num_recv"},
      {EPC_LAYOUT_RANK_MAJOR, &EpcDispatchArgs::out_expert_counts, &l, "out_expert_counts"},
      {EPC_LAYOUT_RANK_MAJOR, &EpcDispatchArgs::out_expert_offsets, &offsets, "out_expert_offsets"},
      {EPC_LAYOUT_EXPERT_PADDED, &EpcDispatchArgs::out_rank_counts, &r, "out_rank_counts"},
      {EPC_LAYOUT_EXPERT_PADDED, &EpcDispatchArgs::out_num_recv, &one, "out_num_recv"},
      {EPC_LAYOUT_EXPERT_PADDED, &EpcDispatchArgs::out_topk_idx, &l, "out_topk_idx"},
  };
  for (const Case& k : cases) {
    Dispatch d(k.layout);
    d.args.*k.field = k.tensor;
    const std::string what = std::string(epc::layout_name(k.layout)) + " " + k.name;
    expect_outcome(d.check(k.layout), EPC_ERR_INVALID_ARGUMENT, {k.name, epc::layout_name(k.layout)}, what.c_str());
  }
  Dispatch padded(EPC_LAYOUT_EXPERT_PADDED);
  EpcTensor w = tensor(EPC_DTYPE_FP32, {8, 64});
  padded.args.out_topk_weights = &w;
  expect_outcome(padded.check(EPC_LAYOUT_EXPERT_PADDED), EPC_ERR_UNSUPPORTED, {"EpcDispatchArgs.out_topk_weights"},
                 "EXPERT_PADDED out_topk_weights");
}

// fp8: e4m3 out_x of the layout's shape and scales [R, T, S] (RANK_MAJOR) or [R * T, S]
// (FLAT), S = H / 128 (E8M0X4: ceil(S / 4) words).
TEST(LlOutputs, Fp8ScalesFollowTheLayout) {
  for (EpcLayout layout : {EPC_LAYOUT_RANK_MAJOR, EPC_LAYOUT_FLAT}) {
    const bool rank_major = layout == EPC_LAYOUT_RANK_MAJOR;
    Dispatch d(layout);
    d.args.quant = EPC_QUANT_FP8;
    d.out_x.dtype = EPC_DTYPE_FP8_E4M3;
    EpcTensor scales = rank_major ? tensor(EPC_DTYPE_FP32, {4, 16, 2}) : tensor(EPC_DTYPE_FP32, {64, 2});
    expect_outcome(d.check(layout), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_scales"}, "no scales");
    d.args.out_scales = &scales;
    epc::LlOutputs out;
    const Outcome o = run([&] { out = epc::check_ll_dispatch_outputs(d.args, setup(layout), shape()); });
    ASSERT_EQ(o.status, EPC_OK) << o.message;
    EXPECT_EQ(out.scales.row_stride, 2);
    EXPECT_EQ(out.scales.expert_stride, rank_major ? 32 : 0);
    EpcTensor packed = rank_major ? tensor(EPC_DTYPE_E8M0X4, {4, 16, 1}) : tensor(EPC_DTYPE_E8M0X4, {64, 1});
    d.args.out_scales = &packed;
    EXPECT_EQ(d.check(layout).status, EPC_OK);
    EpcTensor wrong = rank_major ? tensor(EPC_DTYPE_FP32, {64, 2}) : tensor(EPC_DTYPE_FP32, {4, 16, 2});
    d.args.out_scales = &wrong;
    expect_outcome(d.check(layout), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_scales"}, "other layout's scales");
    d.args.out_scales = &scales;
    d.out_x.dtype = EPC_DTYPE_BF16;
    expect_outcome(d.check(layout), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_x"}, "bf16 out_x with fp8");
  }
}

// A passthrough dispatch of e2m1 x [10, 128] (hidden 256) with S scales of `scale_dtype`.
struct Passthrough {
  Dispatch d;
  EpcTensor x = tensor(EPC_DTYPE_FP4_E2M1X2, {10, 128});
  EpcTensor x_scales;
  EpcTensor out_scales;

  Passthrough(EpcLayout layout, EpcDtype scale_dtype, int64_t S) : d(layout) {
    x_scales = tensor(scale_dtype, {10, S});
    out_scales = layout == EPC_LAYOUT_RANK_MAJOR ? tensor(scale_dtype, {4, 16, S})
                 : layout == EPC_LAYOUT_FLAT     ? tensor(scale_dtype, {64, S})
                                                 : tensor(scale_dtype, {8, 64, S});
    d.out_x.dtype = EPC_DTYPE_FP4_E2M1X2;
    d.out_x.shape[d.out_x.ndim - 1] = 128;
    d.args.quant = EPC_QUANT_PASSTHROUGH;
    d.args.x = &x;
    d.args.x_scales = &x_scales;
    d.args.out_scales = &out_scales;
  }
  // The inputs as both modes check them, then LL's outputs; the payload's scales in `out`.
  Outcome check(EpcLayout layout, epc::LlOutputs* out = nullptr) const {
    return run([&] {
      const epc::PassthroughPayload p = epc::check_passthrough_inputs(d.args, 10, 256);
      const epc::LlOutputs o = epc::check_ll_dispatch_outputs(d.args, setup(layout), shape(), &p);
      if (out != nullptr) *out = o;
    });
  }
};

// A rank with no tokens still has its scale count checked: S whose bytes pass 2^31 - 1 (or
// 64 bits) is refused naming x_scales, before any size is computed from it.
TEST(LlOutputs, PassthroughScaleCountsAreBoundedWithNoTokens) {
  for (int64_t S : {int64_t{1} << 29, (int64_t{1} << 62) + 1}) {
    Passthrough p(EPC_LAYOUT_EXPERT_PADDED, EPC_DTYPE_FP32, S);
    p.x.shape[0] = p.x_scales.shape[0] = 0;
    p.x.data = p.x_scales.data = nullptr;
    const Outcome o = run([&] { epc::check_passthrough_inputs(p.d.args, 0, 256); });
    expect_outcome(o, EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.x_scales", "2^31 - 1"}, "huge S");
  }
}

TEST(LlOutputs, PassthroughOutputsFollowTheLayoutInTheScalesDtype) {
  for (EpcLayout layout : {EPC_LAYOUT_EXPERT_PADDED, EPC_LAYOUT_RANK_MAJOR, EPC_LAYOUT_FLAT}) {
    // NVFP4: e2m1 rows, one e4m3 scale per 16 channels (moved as bytes).
    Passthrough p(layout, EPC_DTYPE_FP8_E4M3, 16);
    epc::LlOutputs out;
    const Outcome o = p.check(layout, &out);
    ASSERT_EQ(o.status, EPC_OK) << o.message;
    EXPECT_EQ(out.scales.encoding, epc::kernels::ScaleEncoding::kRaw8);
    EXPECT_EQ(out.scales.row_stride, 16);
    EXPECT_EQ(out.scales.word_stride, 1);
    // bf16 scales move as 2-byte elements, fp32 and E8M0X4 words as 4-byte ones.
    Passthrough half(layout, EPC_DTYPE_BF16, 3);
    ASSERT_EQ(half.check(layout, &out).status, EPC_OK);
    EXPECT_EQ(out.scales.encoding, epc::kernels::ScaleEncoding::kRaw16);
    Passthrough packed(layout, EPC_DTYPE_E8M0X4, 2);
    ASSERT_EQ(packed.check(layout, &out).status, EPC_OK);
    EXPECT_EQ(out.scales.encoding, epc::kernels::ScaleEncoding::kFp32);
    // out_x has the payload's columns (hidden / 2), in x's dtype.
    p.d.out_x.shape[p.d.out_x.ndim - 1] = 256;
    expect_outcome(p.check(layout), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_x"}, "out_x of hidden columns");
    p.d.out_x.shape[p.d.out_x.ndim - 1] = 128;
    p.d.out_x.dtype = EPC_DTYPE_FP8_E4M3;
    expect_outcome(p.check(layout), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_x"}, "out_x of another dtype");
    p.d.out_x.dtype = EPC_DTYPE_FP4_E2M1X2;
    // out_scales: x_scales' dtype and S, the layout's rows.
    p.out_scales.dtype = EPC_DTYPE_UINT8;
    expect_outcome(p.check(layout), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_scales"}, "another scale dtype");
    p.out_scales.dtype = EPC_DTYPE_FP8_E4M3;
    p.out_scales.shape[p.out_scales.ndim - 1] = 15;
    expect_outcome(p.check(layout), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_scales"}, "another S");
    p.out_scales.shape[p.out_scales.ndim - 1] = 16;
    p.d.args.out_scales = nullptr;
    expect_outcome(p.check(layout), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_scales"}, "no out_scales");
  }
}

TEST(LlOutputs, PassthroughScalesTakeAnyNonOverlappingStrides) {
  // FLAT [64, 4] fp32 column-major with columns padded to 68 rows (TMA-aligned).
  Passthrough p(EPC_LAYOUT_FLAT, EPC_DTYPE_FP32, 4);
  p.out_scales.strides[0] = 1;
  p.out_scales.strides[1] = 68;
  epc::LlOutputs out;
  ASSERT_EQ(p.check(EPC_LAYOUT_FLAT, &out).status, EPC_OK);
  EXPECT_EQ(out.scales.row_stride, 1);
  EXPECT_EQ(out.scales.word_stride, 68);
  p.out_scales.strides[1] = 32;  // columns of 64 rows 32 apart overlap
  expect_outcome(p.check(EPC_LAYOUT_FLAT), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_scales"}, "overlap");
  // 8-byte elements have no raw store on LL.
  Passthrough wide(EPC_LAYOUT_FLAT, EPC_DTYPE_INT64, 1);
  expect_outcome(wide.check(EPC_LAYOUT_FLAT), EPC_ERR_UNSUPPORTED, {"EpcDispatchArgs.x_scales"}, "int64 scales");
}

TEST(LlOutputs, PassthroughInputsAreCheckedAsInEveryMode) {
  Passthrough p(EPC_LAYOUT_FLAT, EPC_DTYPE_FP8_E4M3, 16);
  p.x.shape[1] = 256;
  expect_outcome(p.check(EPC_LAYOUT_FLAT), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.x"}, "e2m1 x of H columns");
  p.x.shape[1] = 128;
  p.d.args.x_scales = nullptr;
  expect_outcome(p.check(EPC_LAYOUT_FLAT), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.x_scales"}, "no x_scales");
  p.d.args.x_scales = &p.x_scales;
  EpcTensor bf16_x = tensor(EPC_DTYPE_BF16, {10, 256});
  p.d.args.x = &bf16_x;
  expect_outcome(p.check(EPC_LAYOUT_FLAT), EPC_ERR_UNSUPPORTED, {"EpcDispatchArgs.x"}, "bf16 x");
  p.d.args.x = &p.x;
  // NVFP4's global scale: [1] fp32 with e2m1 x; refused with e4m3 x, naming it.
  EpcTensor global = tensor(EPC_DTYPE_FP32, {1});
  p.d.args.x_global_scale = &global;
  EXPECT_EQ(p.check(EPC_LAYOUT_FLAT).status, EPC_OK);
  global.shape[0] = 2;
  expect_outcome(p.check(EPC_LAYOUT_FLAT), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.x_global_scale"}, "[2]");
  global.shape[0] = 1;
  global.dtype = EPC_DTYPE_BF16;
  expect_outcome(p.check(EPC_LAYOUT_FLAT), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.x_global_scale"}, "bf16");
  global.dtype = EPC_DTYPE_FP32;
  EpcTensor e4m3_x = tensor(EPC_DTYPE_FP8_E4M3, {10, 256});
  p.d.args.x = &e4m3_x;
  p.d.out_x.shape[1] = 256;
  p.d.out_x.dtype = EPC_DTYPE_FP8_E4M3;
  expect_outcome(p.check(EPC_LAYOUT_FLAT), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.x_global_scale"},
                 "global scale with e4m3 x");
  p.d.args.x_global_scale = nullptr;
  EXPECT_EQ(p.check(EPC_LAYOUT_FLAT).status, EPC_OK);
}

TEST(LlOutputs, PassthroughMessagesHoldTheGroupsTokenBytes) {
  // hidden 256, bf16 window: 512 bytes. e4m3 rows of 256 bytes leave 256 for scales.
  epc::PassthroughPayload p;
  p.row = 256;
  p.scale_count = 64;
  p.scale_bytes = 256;
  EXPECT_EQ(run([&] { epc::check_ll_passthrough_fits(p, 512); }).status, EPC_OK);
  p.scale_count = 65;
  p.scale_bytes = 260;
  expect_outcome(run([&] { epc::check_ll_passthrough_fits(p, 512); }), EPC_ERR_INVALID_ARGUMENT,
                 {"EpcDispatchArgs.x_scales", "512", "max_token_bytes"}, "one scale past the window");
  // An fp8 window (hidden + hidden / 32 = 264 bytes) holds DeepSeek's 2 fp32 scales only.
  p.scale_count = 2;
  p.scale_bytes = 8;
  EXPECT_EQ(run([&] { epc::check_ll_passthrough_fits(p, 264); }).status, EPC_OK);
  p.scale_count = 3;
  p.scale_bytes = 12;
  expect_outcome(run([&] { epc::check_ll_passthrough_fits(p, 264); }), EPC_ERR_INVALID_ARGUMENT,
                 {"EpcDispatchArgs.x_scales", "264"}, "fp8 window");
}

constexpr uint32_t kPerEntry = EPC_GROUP_COMBINE_PER_ENTRY;

// resolve_ll_weighting's result; a throw fails the test.
EpcWeighting resolve(EpcWeighting w, EpcLayout layout, uint32_t flags) {
  EpcWeighting got = EPC_WEIGHTING_DEFAULT;
  const auto o = run([&] { got = epc::resolve_ll_weighting(w, layout, flags); });
  EXPECT_EQ(o.status, EPC_OK) << o.message;
  return got;
}

TEST(LlOutputs, CombineXAndWeightingPerLayout) {
  for (EpcLayout layout : {EPC_LAYOUT_RANK_MAJOR, EPC_LAYOUT_FLAT}) {
    Dispatch d(layout);
    EXPECT_EQ(run([&] {
                epc::check_ll_rows_tensor(&d.out_x, "EpcCombineArgs.x", EPC_DTYPE_BF16, setup(layout), shape());
              }).status,
              EPC_OK);
    for (uint32_t flags : {0u, kPerEntry}) {
      for (EpcWeighting w : {EPC_WEIGHTING_DEFAULT, EPC_WEIGHTING_NONE}) {
        EXPECT_EQ(resolve(w, layout, flags), EPC_WEIGHTING_NONE);
      }
      for (EpcWeighting w : {EPC_WEIGHTING_SENDER, EPC_WEIGHTING_HOME}) {
        expect_outcome(run([&] { epc::resolve_ll_weighting(w, layout, flags); }), EPC_ERR_INVALID_ARGUMENT,
                       {"EpcCombineArgs.weighting", epc::layout_name(layout)}, "SENDER or HOME on a token layout");
      }
    }
  }
  Dispatch flat(EPC_LAYOUT_FLAT);
  expect_outcome(run([&] {
                   epc::check_ll_rows_tensor(&flat.out_x, "EpcCombineArgs.x", EPC_DTYPE_BF16,
                                             setup(EPC_LAYOUT_RANK_MAJOR), shape());
                 }),
                 EPC_ERR_INVALID_ARGUMENT, {"EpcCombineArgs.x"}, "FLAT x on RANK_MAJOR");
  // EXPERT_PADDED: SENDER by default, HOME on a group with EPC_GROUP_COMBINE_PER_ENTRY.
  const EpcLayout padded = EPC_LAYOUT_EXPERT_PADDED;
  for (uint32_t flags : {0u, kPerEntry}) {
    EXPECT_EQ(resolve(EPC_WEIGHTING_DEFAULT, padded, flags), EPC_WEIGHTING_SENDER);
    EXPECT_EQ(resolve(EPC_WEIGHTING_SENDER, padded, flags), EPC_WEIGHTING_SENDER);
    expect_outcome(run([&] { epc::resolve_ll_weighting(EPC_WEIGHTING_NONE, padded, flags); }), EPC_ERR_UNSUPPORTED,
                   {"EpcCombineArgs.weighting", "EPC_WEIGHTING_NONE"}, "NONE on EXPERT_PADDED");
  }
  EXPECT_EQ(resolve(EPC_WEIGHTING_HOME, padded, kPerEntry), EPC_WEIGHTING_HOME);
  expect_outcome(run([&] { epc::resolve_ll_weighting(EPC_WEIGHTING_HOME, padded, 0); }), EPC_ERR_INVALID_ARGUMENT,
                 {"EpcCombineArgs.weighting", "EpcGroupConfig.flags", "EPC_GROUP_COMBINE_PER_ENTRY"},
                 "HOME without the flag");
}

}  // namespace
