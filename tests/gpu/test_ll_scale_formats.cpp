// SPDX-License-Identifier: Apache-2.0
// Low-latency fp8 dispatch into the scale formats grouped GEMMs read, compared bit for bit
// with the reference model's cast and encoding (tests/reference/reference_scales.hpp):
// fp32 column-major over rows with rows padded for TMA, e8m0 bytes row-major and
// column-major, e8m0 packed four to a word (column-major TMA-aligned, and row-major with
// padded rows). Every element the step does not own (rows past each expert's count, the
// padding between strided elements) must keep its poison bytes. Hidden 640: five scales
// per row, so a packed row ends in a partial word.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/reference/reference_scales.hpp"

namespace epc::gputest {
namespace {

constexpr uint8_t kPoison = 0xAB;

struct ScaleFormat {
  const char* name;
  EpcDtype dtype;
  ref::ScaleEncoding encoding;
  bool column_major;  // token stride 1; else the scales of a row are consecutive
  int row_pad;        // rows per column (column-major) or words per row (row-major) added
};

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// One dispatch of `step` into an out_scales of `format`, then the scales checked element by
// element against the reference. `flags` may add EPC_STEP_SEND_ONLY.
void run_format(EpcGroup* group, const Shape& shape, const ll::LlStep& step, const ScaleFormat& f, uint32_t flags) {
  const std::string label = std::string("LL fp8 scales ") + f.name + (flags & EPC_STEP_SEND_ONLY ? " (send-only)" : "");
  Stream stream;
  ASSERT_TRUE(stream.status());
  ll::LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, step.problem.topk));
  ASSERT_TRUE(buffers.upload(step, stream.get()));
  const int64_t L = shape.local_experts(), C = shape.max_rows(), S = shape.hidden / 128;
  const int64_t W = ref::scale_words(f.encoding, static_cast<int>(S));
  const int64_t word_bytes = f.dtype == EPC_DTYPE_E8M0 ? 1 : 4;
  // Element strides: column-major columns of C rows padded to 16 bytes plus row_pad rows,
  // or rows of W words plus row_pad.
  int64_t s_expert = 0, s_row = 0, s_word = 0;
  if (f.column_major) {
    const int64_t column = align_up(C, 16 / word_bytes) + f.row_pad;
    s_row = 1;
    s_word = column;
    s_expert = W * column;
  } else {
    s_word = 1;
    s_row = W + f.row_pad;
    s_expert = C * s_row;
  }
  const size_t bytes = static_cast<size_t>(L * s_expert * word_bytes);
  DeviceMemory scales;
  ASSERT_TRUE(scales.allocate(bytes, "strided out_scales"));
  ASSERT_EQ(cudaMemsetAsync(scales.get(), kPoison, bytes, stream.get()), cudaSuccess);
  EpcTensor out_scales{scales.get(), f.dtype, 3, {L, C, W, 0}, {s_expert, s_row, s_word, 0}};

  const EpcTensor idx = buffers.topk_idx(), x = buffers.x(), w = buffers.topk_weights(), out_x = buffers.out_x(),
                  counts = buffers.out_counts();
  HandlePtr handle;
  ASSERT_TRUE(create_handle_with(group, handle_config(), &idx, stream.get(), handle, label + ": epc_handle_create"));
  EpcDispatchArgs args = EPC_DISPATCH_ARGS_INIT;
  args.flags = flags;
  args.quant = EPC_QUANT_FP8;
  args.x = &x;
  args.topk_weights = &w;
  args.out_x = &out_x;
  args.out_scales = &out_scales;
  args.out_expert_counts = &counts;
  ASSERT_TRUE(epc_ok(epc_dispatch(handle.get(), &args, stream.get()), label + ": epc_dispatch"));
  if (flags & EPC_STEP_SEND_ONLY) {
    ASSERT_TRUE(epc_ok(epc_complete(handle.get(), 0, stream.get()), label + ": epc_complete"));
  }
  std::vector<uint8_t> got(bytes);
  std::vector<int32_t> got_counts(static_cast<size_t>(L));
  ASSERT_TRUE(download_and_wait({{got.data(), scales.get(), bytes, "out_scales"},
                                 {got_counts.data(), counts.data, got_counts.size() * 4, "out_expert_counts"}},
                                stream.get()));
  ASSERT_EQ(got_counts, step.want_counts) << label;

  std::vector<bool> owned(bytes, false);
  int mismatches = 0;
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t r = 0; r < step.want_counts[static_cast<size_t>(l)]; ++r) {
      // Only received rows have scales (the reference leaves the others 0).
      const auto first = step.want_scales.begin() + (l * C + r) * S;
      const std::vector<uint32_t> want =
          ref::encode_scales(std::vector<float>(first, first + S), 1, static_cast<int>(S), f.encoding);
      for (int64_t k = 0; k < W; ++k) {
        const size_t at = static_cast<size_t>((l * s_expert + r * s_row + k * s_word) * word_bytes);
        uint32_t value = 0;
        std::memcpy(&value, &got[at], static_cast<size_t>(word_bytes));
        for (int64_t b = 0; b < word_bytes; ++b) owned[at + static_cast<size_t>(b)] = true;
        const uint32_t expected = want[static_cast<size_t>(k)];
        if (value != expected && mismatches++ == 0) {
          ADD_FAILURE() << label << ": expert " << l << " row " << r << " word " << k << " is 0x" << std::hex << value
                        << ", the reference says 0x" << expected;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << label;
  size_t touched = 0;
  for (size_t i = 0; i < bytes; ++i) touched += !owned[i] && got[i] != kPoison;
  EXPECT_EQ(touched, 0u) << label << ": bytes outside the rows the step owns were written";
}

TEST(LowLatencyScales, EncodingsAndStridesMatchTheReference) {
  const Shape shape = world_shape(8, 640, 16, 8);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  const ScaleFormat formats[] = {
      {"fp32 column-major, TMA-aligned", EPC_DTYPE_FP32, ref::ScaleEncoding::kFp32, true, 0},
      {"fp32 row-major, padded rows", EPC_DTYPE_FP32, ref::ScaleEncoding::kFp32, false, 3},
      {"e8m0 row-major", EPC_DTYPE_E8M0, ref::ScaleEncoding::kE8m0, false, 0},
      {"e8m0 column-major", EPC_DTYPE_E8M0, ref::ScaleEncoding::kE8m0, true, 1},
      {"e8m0x4 column-major, TMA-aligned", EPC_DTYPE_E8M0X4, ref::ScaleEncoding::kE8m0x4, true, 0},
      {"e8m0x4 row-major, padded rows", EPC_DTYPE_E8M0X4, ref::ScaleEncoding::kE8m0x4, false, 2},
  };
  uint64_t seed = 97000;
  for (const ScaleFormat& f : formats) {
    ref::LlDispatchOptions options;
    options.use_fp8 = true;
    // e8m0 holds powers of two only: the cast rounds every scale up, without the flag.
    options.round_scale_ue8m0 = f.encoding != ref::ScaleEncoding::kFp32;
    const ll::LlStep step = ll::make_step(ll::random_problem(shape, 8, seed, true, 0.1), seed + 1, my_rank(), options);
    run_format(group.get(), shape, step, f, 0);
    run_format(group.get(), shape, step, f, EPC_STEP_SEND_ONLY);
    seed += 10;
  }
}

}  // namespace
}  // namespace epc::gputest
