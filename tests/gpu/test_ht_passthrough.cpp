// SPDX-License-Identifier: Apache-2.0
// HT EPC_QUANT_PASSTHROUGH beyond 2.0's fp8 with fp32 [B, H/128] scales: e4m3 and e2m1 rows
// with any scale count and scale dtypes fp32, bf16, e8m0, e8m0x4 and uint8, in the flat and
// the expert-packed layouts, compared byte for byte with the reference model
// (ref::ht_dispatch, ref::ht_dispatch_packed with HtPayload::kPassthrough); combine after a
// packed passthrough dispatch; a group whose max_token_bytes holds more than 2 * H, and the
// refusal of a row and scales beyond max_token_bytes. Every rank checks its own part.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/reference/reference_ht_packed.hpp"

namespace epc::gputest::ht {
namespace {

struct PassCase {
  ref::QuantPayload payload;
  ref::ScaleDtype scales;
  EpcDtype scale_dtype;
  int scale_count;
  bool packed;
  uint32_t max_token_bytes;  // 0: the default window (2 * H)
};

std::string last_error() {
  char text[1024] = {0};
  size_t length = 0;
  epc_last_error(text, sizeof text, &length);
  return text;
}

std::string case_label(const PassCase& k) {
  return std::string(k.payload == ref::QuantPayload::kE4m3 ? "e4m3" : "e2m1") + " scales dtype " +
         std::to_string(k.scale_dtype) + " x " + std::to_string(k.scale_count) + (k.packed ? " packed" : " flat") +
         " max_token_bytes " + std::to_string(k.max_token_bytes);
}

void run_case(const PassCase& k, uint64_t seed) {
  const std::string label = case_label(k);
  const HtShape shape = world_shape(8, 2048, 128, 8);
  ProblemSpec spec = random_spec(8, seed);
  ref::Problem p = make_problem(shape, spec);
  ref::PassthroughFormat f;
  f.payload = k.payload;
  f.scales = k.scales;
  f.scale_count = k.scale_count;
  const int row_bytes = ref::passthrough_row_bytes(shape.hidden, f), scale_bytes = ref::passthrough_scale_bytes(f);
  std::mt19937_64 engine(seed * 977);
  for (ref::RankTokens& r : p.ranks) {  // every byte value, NaN and e8m0 0xFF included
    r.x_quant.resize(size_t(r.num_tokens) * row_bytes);
    r.x_scale_bytes.resize(size_t(r.num_tokens) * scale_bytes);
    for (uint8_t& b : r.x_quant) b = static_cast<uint8_t>(engine());
    for (uint8_t& b : r.x_scale_bytes) b = static_cast<uint8_t>(engine());
  }
  const int rank = my_rank(), K = p.topk;
  // The model's rows for this rank: payload and scale bytes, and which rows are entries.
  std::vector<uint8_t> want_x, want_s;
  int want_rows = 0;
  if (k.packed) {
    ref::HtPackedOptions o;
    o.payload = ref::HtPayload::kPassthrough;
    o.passthrough = f;
    o.alignment = 16;
    const ref::HtPackedResult r = ref::ht_dispatch_packed(p, o)[rank];
    want_x = r.payload;  // padding rows zero: the handle zero-pads
    want_s = r.scales;
    want_rows = r.rows;
  } else {
    ref::HtDispatchOptions o;
    o.payload = ref::HtPayload::kPassthrough;
    o.passthrough = f;
    const ref::HtDispatchResult r = ref::ht_dispatch(p, o)[rank];
    want_x = r.x_quant;
    want_s = r.x_scale_bytes;
    want_rows = r.num_recv;
  }
  const ref::RankTokens& mine = p.ranks[rank];
  const int B = mine.num_tokens;

  EpcGroupConfig gc = group_config(shape, EPC_MODE_HIGH_THROUGHPUT);
  gc.max_token_bytes = k.max_token_bytes;
  EpcGroup* raw_group = nullptr;
  ASSERT_EQ(epc_group_create(context().comm, &gc, &raw_group), EPC_OK) << label;
  GroupPtr group(raw_group);
  Stream owned_stream;
  cudaStream_t stream = owned_stream.get();
  EpcHandleConfig hc = handle_config(EPC_SIZING_EXACT, k.packed ? EPC_HANDLE_ZERO_PADDING : 0);
  if (k.packed) {
    hc.layout = EPC_LAYOUT_EXPERT_PACKED;
    hc.expert_alignment = 16;
  }
  DeviceMemory idx, x, xs, w;
  ASSERT_TRUE(idx.allocate(sizeof(int64_t) * std::max<size_t>(1, mine.topk_idx.size()), "topk_idx"));
  ASSERT_TRUE(upload_bytes(idx.get(), mine.topk_idx.data(), sizeof(int64_t) * mine.topk_idx.size(), stream, "idx"));
  EpcTensor idx_t = make_tensor(idx.get(), EPC_DTYPE_INT64, {B, K});
  HandlePtr handle;
  ASSERT_TRUE(create_handle_with(group.get(), hc, &idx_t, stream, handle, label));
  EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
  ASSERT_TRUE(query_handle(handle.get(), info));
  const int64_t rows = info.rows;
  ASSERT_EQ(rows, want_rows) << label;

  const int64_t cols = k.payload == ref::QuantPayload::kE4m3 ? shape.hidden : shape.hidden / 2;
  const EpcDtype xd = k.payload == ref::QuantPayload::kE4m3 ? EPC_DTYPE_FP8_E4M3 : EPC_DTYPE_FP4_E2M1X2;
  ASSERT_TRUE(x.allocate(std::max<size_t>(1, size_t(B) * row_bytes), "x"));
  ASSERT_TRUE(xs.allocate(std::max<size_t>(1, size_t(B) * scale_bytes), "x_scales"));
  ASSERT_TRUE(w.allocate(std::max<size_t>(1, mine.topk_weights.size() * 4), "w"));
  ASSERT_TRUE(upload_bytes(x.get(), mine.x_quant.data(), mine.x_quant.size(), stream, "x"));
  ASSERT_TRUE(upload_bytes(xs.get(), mine.x_scale_bytes.data(), mine.x_scale_bytes.size(), stream, "x_scales"));
  ASSERT_TRUE(upload_bytes(w.get(), mine.topk_weights.data(), mine.topk_weights.size() * 4, stream, "w"));
  DeviceMemory out_x, out_s;
  ASSERT_TRUE(out_x.allocate(std::max<size_t>(1, size_t(rows) * row_bytes), "out_x"));
  ASSERT_TRUE(out_s.allocate(std::max<size_t>(1, size_t(rows) * scale_bytes), "out_scales"));
  for (DeviceMemory* m : {&out_x, &out_s}) ASSERT_EQ(cudaMemsetAsync(m->get(), 0xA5, m->bytes(), stream), cudaSuccess);
  const int64_t S = k.scale_count;
  const EpcTensor x_t = make_tensor(x.get(), xd, {B, cols}), xs_t = make_tensor(xs.get(), k.scale_dtype, {B, S});
  const EpcTensor w_t = make_tensor(w.get(), EPC_DTYPE_FP32, {B, K});
  const EpcTensor ox_t = make_tensor(out_x.get(), xd, {rows, cols}),
                  os_t = make_tensor(out_s.get(), k.scale_dtype, {rows, S});
  EpcDispatchArgs da = EPC_DISPATCH_ARGS_INIT;
  da.quant = EPC_QUANT_PASSTHROUGH;
  da.x = &x_t;
  da.x_scales = &xs_t;
  da.topk_weights = &w_t;
  da.out_x = &ox_t;
  da.out_scales = &os_t;
  ASSERT_EQ(epc_dispatch(handle.get(), &da, stream), EPC_OK) << label << ": " << last_error();
  std::vector<uint8_t> got_x(size_t(rows) * row_bytes), got_s(size_t(rows) * scale_bytes);
  ASSERT_TRUE(download_and_wait(
      {{got_x.data(), out_x.get(), got_x.size(), "out_x"}, {got_s.data(), out_s.get(), got_s.size(), "out_scales"}},
      stream));
  EXPECT_TRUE(got_x == want_x) << label << " out_x";
  EXPECT_TRUE(got_s == want_s) << label << " out_scales";

  // Combine after a packed passthrough dispatch: the rows dispatch gave each entry, as given.
  if (k.packed) {
    std::vector<std::vector<uint16_t>> y(p.nranks);
    const std::vector<ref::HtPackedResult> all = [&] {
      ref::HtPackedOptions o;
      o.payload = ref::HtPayload::kPassthrough;
      o.passthrough = f;
      o.alignment = 16;
      return ref::ht_dispatch_packed(p, o);
    }();
    for (int q = 0; q < p.nranks; ++q)
      for (int64_t i = 0; i < int64_t{all[q].rows} * shape.hidden; ++i) y[q].push_back(random_bf16(engine));
    const ref::HtCombineResult want = ref::ht_combine_packed(p, y, false, 16);
    DeviceMemory cx, out;
    ASSERT_TRUE(cx.allocate(std::max<size_t>(1, y[rank].size() * 2), "combine x"));
    ASSERT_TRUE(out.allocate(std::max<size_t>(1, size_t(B) * shape.hidden * 2), "out"));
    ASSERT_TRUE(upload_bytes(cx.get(), y[rank].data(), y[rank].size() * 2, stream, "combine x"));
    const EpcTensor cx_t = make_tensor(cx.get(), EPC_DTYPE_BF16, {rows, shape.hidden});
    const EpcTensor out_t = make_tensor(out.get(), EPC_DTYPE_BF16, {B, shape.hidden});
    EpcCombineArgs ca = EPC_COMBINE_ARGS_INIT;
    ca.x = &cx_t;
    ca.out = &out_t;
    ca.weighting = EPC_WEIGHTING_NONE;
    ASSERT_EQ(epc_combine(handle.get(), &ca, stream), EPC_OK) << label;
    std::vector<uint16_t> got_out(size_t(B) * shape.hidden);
    ASSERT_TRUE(download_and_wait({{got_out.data(), out.get(), got_out.size() * 2, "out"}}, stream));
    EXPECT_EQ(got_out, want.x[rank]) << label << " combine";
  }

  // One scale more than the window holds: refused, naming x_scales (as LL groups do) and
  // max_token_bytes, nothing written.
  const int64_t window = k.max_token_bytes == 0 ? 2 * shape.hidden : k.max_token_bytes;
  const int64_t element = scale_bytes / k.scale_count;
  const int64_t too_many = (window - row_bytes) / element + 1;
  DeviceMemory big_s, big_out;
  ASSERT_TRUE(big_s.allocate(std::max<size_t>(1, size_t(B) * too_many * element), "big scales"));
  ASSERT_TRUE(big_out.allocate(std::max<size_t>(1, size_t(rows) * too_many * element), "big out scales"));
  const EpcTensor bs_t = make_tensor(big_s.get(), k.scale_dtype, {B, too_many}),
                  bo_t = make_tensor(big_out.get(), k.scale_dtype, {rows, too_many});
  da.x_scales = &bs_t;
  da.out_scales = &bo_t;
  EXPECT_EQ(epc_dispatch(handle.get(), &da, stream), EPC_ERR_INVALID_ARGUMENT) << label;
  const std::string message = last_error();
  EXPECT_NE(message.find("EpcDispatchArgs.x_scales"), std::string::npos) << message;
  EXPECT_NE(message.find("max_token_bytes"), std::string::npos) << message;
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
}

TEST(HighThroughputPassthrough, MatchesTheReference) {
  using ref::QuantPayload;
  using ref::ScaleDtype;
  const PassCase cases[] = {
      // payload, scale dtype (model, ABI), S, packed, max_token_bytes
      {QuantPayload::kE4m3, ScaleDtype::kFp32, EPC_DTYPE_FP32, 16, false, 0},       // 2.0's DeepSeek fp8
      {QuantPayload::kE4m3, ScaleDtype::kE8m0, EPC_DTYPE_E8M0, 64, false, 0},       // MXFP8
      {QuantPayload::kE4m3, ScaleDtype::kE8m0x4, EPC_DTYPE_E8M0X4, 16, true, 0},    // MXFP8 packed words
      {QuantPayload::kE2m1, ScaleDtype::kUint8, EPC_DTYPE_UINT8, 128, false, 0},    // NVFP4 block scales
      {QuantPayload::kE2m1, ScaleDtype::kUint8, EPC_DTYPE_UINT8, 128, true, 0},     // NVFP4, packed
      {QuantPayload::kE2m1, ScaleDtype::kBf16, EPC_DTYPE_BF16, 3, true, 0},         // odd count
      {QuantPayload::kE4m3, ScaleDtype::kUint8, EPC_DTYPE_UINT8, 7, false, 0},      // odd bytes
      {QuantPayload::kE4m3, ScaleDtype::kFp32, EPC_DTYPE_FP32, 1000, false, 6144},  // beyond 2 * H
      {QuantPayload::kE2m1, ScaleDtype::kBf16, EPC_DTYPE_BF16, 1000, true, 4000},   // no 16-bit rows
  };
  uint64_t seed = 47000;
  for (const PassCase& k : cases) run_case(k, seed++);
}

}  // namespace
}  // namespace epc::gputest::ht
