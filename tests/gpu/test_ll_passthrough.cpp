// SPDX-License-Identifier: Apache-2.0
// Low-latency EPC_QUANT_PASSTHROUGH against the reference model (ll_dispatch and
// ll_dispatch_tokens with the passthrough option), byte for byte, in every layout, fused and
// send-only: DeepSeek's e4m3 with fp32 scales (S = H / 128), MXFP8 (e8m0, S = H / 32, and
// packed four to a word), NVFP4 (e2m1 with one e4m3 scale per 16 channels and the per-tensor
// x_global_scale), bf16 and uint8 scales of odd counts, into row-major and column-major
// (TMA-aligned) out_scales. Every byte the step does not own keeps its poison; combine after
// the dispatch still sums the bf16 expert outputs as the reference does; a row and scales
// beyond the group's message are refused with nothing written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/reference/reference_ll_tokens.hpp"

namespace epc::gputest {
namespace {

constexpr uint8_t kPoison = 0xA5;

struct PassCase {
  const char* name;
  ref::QuantPayload payload;
  ref::ScaleDtype scales;
  EpcDtype scale_dtype;
  int scale_count;
  bool global_scale;  // x_global_scale (NVFP4)
  bool column_major;  // out_scales token stride 1, columns padded to 16 bytes
};

const char* layout_label(EpcLayout layout) {
  return layout == EPC_LAYOUT_RANK_MAJOR ? "RANK_MAJOR" : layout == EPC_LAYOUT_FLAT ? "FLAT" : "EXPERT_PADDED";
}

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

int first_mismatch(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) return static_cast<int>(i);
  }
  return -1;
}

// out_scales over out_x's rows, as `zones` zones of `zone_rows` rows (FLAT: one zone, 2-D),
// row-major or column-major inside each zone; element strides and the tensor's bytes.
struct ScaleLayout {
  int64_t zones, zone_rows, element, s_zone, s_row, s_word, bytes;
  int64_t at(int64_t row, int64_t word) const {  // byte offset of element `word` of out_x's row
    return ((row / zone_rows) * s_zone + (row % zone_rows) * s_row + word * s_word) * element;
  }
};

ScaleLayout scale_layout(EpcLayout layout, const Shape& shape, const PassCase& k, int64_t element) {
  ScaleLayout s{};
  s.zones = layout == EPC_LAYOUT_EXPERT_PADDED ? shape.local_experts()
            : layout == EPC_LAYOUT_RANK_MAJOR  ? shape.nranks
                                               : 1;
  s.zone_rows = layout == EPC_LAYOUT_RANK_MAJOR ? shape.max_tokens : shape.max_rows();
  s.element = element;
  if (k.column_major) {
    s.s_row = 1;
    s.s_word = align_up(s.zone_rows, 16 / element);
    s.s_zone = k.scale_count * s.s_word;
  } else {
    s.s_word = 1;
    s.s_row = k.scale_count + 1;  // one element of padding per row
    s.s_zone = s.zone_rows * s.s_row;
  }
  s.bytes = s.zones * s.s_zone * element;
  return s;
}

void run_case(EpcGroup* group, const Shape& shape, EpcLayout layout, const PassCase& k, uint32_t flags, bool refusal,
              uint64_t seed) {
  const std::string label = std::string("LL passthrough ") + layout_label(layout) + " " + k.name +
                            (flags & EPC_STEP_SEND_ONLY ? " send-only" : " fused");
  const int me = my_rank(), K = 8, H = shape.hidden, R = shape.nranks, T = shape.max_tokens;
  const int L = shape.local_experts();
  ref::Problem p = ll::random_problem(shape, K, seed, true, 0.1);
  ref::PassthroughFormat f;
  f.payload = k.payload;
  f.scales = k.scales;
  f.scale_count = k.scale_count;
  ll::fill_passthrough(p, f, seed + 1);
  const ll::PassthroughRows want = ll::passthrough_rows(p, layout, f, me);
  const ref::RankTokens& mine = p.ranks[me];
  const int B = mine.num_tokens;
  const int64_t row_bytes = want.row_bytes, S = k.scale_count, element = want.scale_bytes / S;
  const ScaleLayout sl = scale_layout(layout, shape, k, element);
  const bool padded = layout == EPC_LAYOUT_EXPERT_PADDED, rank_major = layout == EPC_LAYOUT_RANK_MAJOR;

  // The bytes the step must leave: the reference rows where written, poison elsewhere.
  std::vector<uint8_t> want_x(static_cast<size_t>(want.rows) * row_bytes, kPoison);
  std::vector<uint8_t> want_s(static_cast<size_t>(sl.bytes), kPoison);
  for (int i = 0; i < want.rows; ++i) {
    if (!want.written[i]) continue;
    std::memcpy(&want_x[size_t(i) * row_bytes], &want.x[size_t(i) * row_bytes], size_t(row_bytes));
    for (int64_t w = 0; w < S; ++w) {
      std::memcpy(&want_s[size_t(sl.at(i, w))], &want.scales[size_t(i * want.scale_bytes + w * element)],
                  size_t(element));
    }
  }

  Stream owned;
  ASSERT_TRUE(owned.status());
  cudaStream_t stream = owned.get();
  DeviceMemory idx, x, xs, w, global, out_x, out_s, counts, expert_out, out;
  ASSERT_TRUE(idx.allocate(std::max<size_t>(8, mine.topk_idx.size() * 8), "topk_idx"));
  ASSERT_TRUE(x.allocate(std::max<size_t>(16, mine.x_quant.size()), "x"));
  ASSERT_TRUE(xs.allocate(std::max<size_t>(16, mine.x_scale_bytes.size()), "x_scales"));
  ASSERT_TRUE(w.allocate(std::max<size_t>(4, mine.topk_weights.size() * 4), "topk_weights"));
  ASSERT_TRUE(global.allocate(4, "x_global_scale"));
  ASSERT_TRUE(out_x.allocate(want_x.size(), "out_x"));
  ASSERT_TRUE(out_s.allocate(want_s.size(), "out_scales"));
  ASSERT_TRUE(counts.allocate(size_t(L) * 4, "out_expert_counts"));
  ASSERT_TRUE(upload_bytes(idx.get(), mine.topk_idx.data(), mine.topk_idx.size() * 8, stream, "topk_idx"));
  ASSERT_TRUE(upload_bytes(x.get(), mine.x_quant.data(), mine.x_quant.size(), stream, "x"));
  ASSERT_TRUE(upload_bytes(xs.get(), mine.x_scale_bytes.data(), mine.x_scale_bytes.size(), stream, "x_scales"));
  ASSERT_TRUE(upload_bytes(w.get(), mine.topk_weights.data(), mine.topk_weights.size() * 4, stream, "topk_weights"));
  const float one = 1.0f;
  ASSERT_TRUE(upload_bytes(global.get(), &one, 4, stream, "x_global_scale"));
  for (DeviceMemory* m : {&out_x, &out_s, &counts}) {
    ASSERT_EQ(cudaMemsetAsync(m->get(), kPoison, m->bytes(), stream), cudaSuccess);
  }

  const EpcDtype xd = k.payload == ref::QuantPayload::kE4m3 ? EPC_DTYPE_FP8_E4M3 : EPC_DTYPE_FP4_E2M1X2;
  const int64_t cols = k.payload == ref::QuantPayload::kE4m3 ? H : H / 2;
  const EpcTensor t_idx = make_tensor(idx.get(), EPC_DTYPE_INT64, {B, K});
  const EpcTensor t_x = make_tensor(x.get(), xd, {B, cols});
  const EpcTensor t_xs = make_tensor(xs.get(), k.scale_dtype, {B, S});
  const EpcTensor t_w = make_tensor(w.get(), EPC_DTYPE_FP32, {B, K});
  const EpcTensor t_global = make_tensor(global.get(), EPC_DTYPE_FP32, {1});
  const EpcTensor t_out_x = padded       ? make_tensor(out_x.get(), xd, {L, int64_t{R} * T, cols})
                            : rank_major ? make_tensor(out_x.get(), xd, {R, T, cols})
                                         : make_tensor(out_x.get(), xd, {int64_t{R} * T, cols});
  EpcTensor t_out_s =
      padded || rank_major
          ? EpcTensor{out_s.get(),
                      k.scale_dtype,
                      3,
                      {sl.zones, sl.zone_rows, S, 0},
                      {sl.s_zone, sl.s_row, sl.s_word, 0}}
          : EpcTensor{out_s.get(), k.scale_dtype, 2, {sl.zone_rows, S, 0, 0}, {sl.s_row, sl.s_word, 0, 0}};
  const EpcTensor t_counts = make_tensor(counts.get(), EPC_DTYPE_INT32, {L});

  EpcHandleConfig config = EPC_HANDLE_CONFIG_INIT;
  config.layout = layout;
  HandlePtr handle;
  ASSERT_TRUE(create_handle_with(group, config, &t_idx, stream, handle, label + ": epc_handle_create"));
  EpcDispatchArgs d = EPC_DISPATCH_ARGS_INIT;
  d.flags = flags;
  d.quant = EPC_QUANT_PASSTHROUGH;
  d.x = &t_x;
  d.x_scales = &t_xs;
  d.x_global_scale = k.global_scale ? &t_global : nullptr;
  d.topk_weights = &t_w;
  d.out_x = &t_out_x;
  d.out_scales = &t_out_s;
  if (!rank_major) d.out_expert_counts = &t_counts;

  if (refusal) {
    // One scale more than the group's message holds (2 * H bytes per token): refused,
    // naming x_scales, with nothing written.
    const int64_t too_many = (2 * int64_t{H} - row_bytes) / element + 1;
    DeviceMemory big_in, big_out;
    const int64_t out_rows = int64_t{want.rows};
    ASSERT_TRUE(big_in.allocate(std::max<size_t>(16, size_t(B * too_many * element)), "big x_scales"));
    ASSERT_TRUE(big_out.allocate(size_t(out_rows * too_many * element), "big out_scales"));
    const EpcTensor t_big_in = make_tensor(big_in.get(), k.scale_dtype, {B, too_many});
    const EpcTensor t_big_out = padded       ? make_tensor(big_out.get(), k.scale_dtype, {L, int64_t{R} * T, too_many})
                                : rank_major ? make_tensor(big_out.get(), k.scale_dtype, {R, T, too_many})
                                             : make_tensor(big_out.get(), k.scale_dtype, {out_rows, too_many});
    EpcDispatchArgs big = d;
    big.x_scales = &t_big_in;
    big.out_scales = &t_big_out;
    EXPECT_EQ(epc_dispatch(handle.get(), &big, stream), EPC_ERR_INVALID_ARGUMENT) << label;
    char text[1024] = {0};
    size_t length = 0;
    epc_last_error(text, sizeof text, &length);
    EXPECT_NE(std::string(text).find("EpcDispatchArgs.x_scales"), std::string::npos) << text;
    std::vector<uint8_t> got(want_x.size());
    ASSERT_TRUE(download_and_wait({{got.data(), out_x.get(), got.size(), "out_x"}}, stream));
    EXPECT_EQ(std::count(got.begin(), got.end(), kPoison), static_cast<long>(got.size()))
        << label << ": a refused dispatch wrote out_x";
  }

  ASSERT_TRUE(epc_ok(epc_dispatch(handle.get(), &d, stream), label + ": epc_dispatch"));
  if (flags & EPC_STEP_SEND_ONLY) {
    ASSERT_TRUE(epc_ok(epc_complete(handle.get(), 0, stream), label + ": complete"));
  }
  std::vector<uint8_t> got_x(want_x.size()), got_s(want_s.size());
  std::vector<int32_t> got_counts(static_cast<size_t>(L));
  ASSERT_TRUE(download_and_wait({{got_x.data(), out_x.get(), got_x.size(), "out_x"},
                                 {got_s.data(), out_s.get(), got_s.size(), "out_scales"},
                                 {got_counts.data(), counts.get(), got_counts.size() * 4, "out_expert_counts"}},
                                stream));
  EXPECT_EQ(first_mismatch(got_x, want_x), -1) << label << ": out_x byte (rows of " << row_bytes << ")";
  EXPECT_EQ(first_mismatch(got_s, want_s), -1) << label << ": out_scales byte";
  if (!rank_major) {
    EXPECT_EQ(got_counts, want.expert_counts) << label;
  }

  // Combine takes bf16 expert outputs after any dispatch payload.
  std::vector<std::vector<uint16_t>> y;
  std::vector<uint16_t> want_out;
  if (padded) {
    y = ll::make_expert_outputs(p, seed + 2);
    want_out = ref::round_sums(ref::ll_combine_sums(p, y, ref::CombineOrder::kPerRankPrereduce)[me], ref::Dtype::kBf16);
  } else {
    std::mt19937_64 engine(seed + 2);
    y.assign(size_t(R), std::vector<uint16_t>(size_t(R) * T * H));
    for (auto& rows : y) {
      for (uint16_t& v : rows) v = random_bf16(engine);
    }
    const ref::LlTokenLayout tl = rank_major ? ref::LlTokenLayout::kRankMajor : ref::LlTokenLayout::kFlat;
    want_out = ref::ll_combine_tokens(p, y, tl)[me];
  }
  ASSERT_TRUE(expert_out.allocate(y[me].size() * 2, "expert outputs"));
  ASSERT_TRUE(out.allocate(std::max<size_t>(2, size_t(B) * H * 2), "out"));
  ASSERT_TRUE(upload_bytes(expert_out.get(), y[me].data(), y[me].size() * 2, stream, "expert outputs"));
  const EpcTensor t_expert_out = padded       ? make_tensor(expert_out.get(), EPC_DTYPE_BF16, {L, int64_t{R} * T, H})
                                 : rank_major ? make_tensor(expert_out.get(), EPC_DTYPE_BF16, {R, T, H})
                                              : make_tensor(expert_out.get(), EPC_DTYPE_BF16, {int64_t{R} * T, H});
  const EpcTensor t_out = make_tensor(out.get(), EPC_DTYPE_BF16, {B, H});
  EpcCombineArgs c = EPC_COMBINE_ARGS_INIT;
  c.flags = flags;
  c.x = &t_expert_out;
  c.out = &t_out;
  ASSERT_TRUE(epc_ok(epc_combine(handle.get(), &c, stream), label + ": epc_combine"));
  if (flags & EPC_STEP_SEND_ONLY) {
    ASSERT_TRUE(epc_ok(epc_complete(handle.get(), 0, stream), label + ": complete"));
  }
  std::vector<uint16_t> got_out(size_t(B) * H);
  ASSERT_TRUE(download_and_wait({{got_out.data(), out.get(), got_out.size() * 2, "out"}}, stream));
  EXPECT_TRUE(got_out == want_out) << label << ": combine out";
}

// hidden 2048; T 16 with B drawn in [0, T]; top-8 of 8 experts per rank.
TEST(LowLatencyPassthrough, EveryLayoutMatchesTheReference) {
  using ref::QuantPayload;
  using ref::ScaleDtype;
  const Shape shape = world_shape(8, 2048, 16, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  const PassCase cases[] = {
      {"e4m3 + fp32 S=H/128", QuantPayload::kE4m3, ScaleDtype::kFp32, EPC_DTYPE_FP32, 16, false, false},
      {"MXFP8 e4m3 + e8m0 S=H/32", QuantPayload::kE4m3, ScaleDtype::kE8m0, EPC_DTYPE_E8M0, 64, false, true},
      {"e4m3 + e8m0x4", QuantPayload::kE4m3, ScaleDtype::kE8m0x4, EPC_DTYPE_E8M0X4, 16, false, true},
      {"NVFP4 e2m1 + e4m3 S=H/16 + global", QuantPayload::kE2m1, ScaleDtype::kUint8, EPC_DTYPE_FP8_E4M3, 128, true,
       false},
      {"e4m3 + bf16 S=3", QuantPayload::kE4m3, ScaleDtype::kBf16, EPC_DTYPE_BF16, 3, false, true},
      {"e2m1 + uint8 S=7", QuantPayload::kE2m1, ScaleDtype::kUint8, EPC_DTYPE_UINT8, 7, false, true},
  };
  uint64_t seed = 131000;
  for (EpcLayout layout : {EPC_LAYOUT_EXPERT_PADDED, EPC_LAYOUT_RANK_MAJOR, EPC_LAYOUT_FLAT}) {
    bool first = true;
    for (const PassCase& k : cases) {
      for (uint32_t flags : {0u, static_cast<uint32_t>(EPC_STEP_SEND_ONLY)}) {
        run_case(group.get(), shape, layout, k, flags, first, seed);
        first = false;
        seed += 10;
      }
    }
  }
}

// An fp8 window (max_token_bytes hidden + hidden / 32) holds e4m3 rows with one fp32 scale
// per 128 channels exactly.
TEST(LowLatencyPassthrough, Fp8WindowHoldsDeepSeekFp8) {
  const Shape shape = world_shape(8, 2048, 16, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group, EPC_DTYPE_FP8_E4M3));
  const PassCase k = {"e4m3 + fp32 S=H/128, fp8 window",
                      ref::QuantPayload::kE4m3,
                      ref::ScaleDtype::kFp32,
                      EPC_DTYPE_FP32,
                      16,
                      false,
                      true};
  run_case(group.get(), shape, EPC_LAYOUT_EXPERT_PADDED, k, 0, false, 139000);
  run_case(group.get(), shape, EPC_LAYOUT_FLAT, k, EPC_STEP_SEND_ONLY, false, 139010);
}

}  // namespace
}  // namespace epc::gputest
