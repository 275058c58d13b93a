// SPDX-License-Identifier: Apache-2.0
// The tensor descriptor checks every dispatch, combine and handle call runs before any launch
// (core/tensor_check.cpp), without a GPU: the data pointers are never dereferenced.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include "core/error.hpp"
#include "core/scale_output.hpp"
#include "core/tensor_check.hpp"

namespace {

void* const kDevice = reinterpret_cast<void*>(uintptr_t{0x7f0000000000});

EpcTensor tensor2(EpcDtype dtype, int64_t rows, int64_t cols, void* data = kDevice) {
  return EpcTensor{data, dtype, 2, {rows, cols, 0, 0}, {0, 0, 0, 0}};
}

// The status check_tensor throws (EPC_OK when it accepts), and its message.
EpcStatus status_of(const EpcTensor& t, const epc::TensorRule& rule, std::string* message = nullptr) {
  try {
    epc::check_tensor(&t, rule);
    return EPC_OK;
  } catch (const epc::Error& e) {
    if (message != nullptr) *message = e.what();
    return e.status();
  }
}

const epc::TensorRule kTopkIdx{"topk_idx", {EPC_DTYPE_INT64, EPC_DTYPE_INT32}, {epc::kAnyExtent, 8}, 4};
const epc::TensorRule kX{"x", {EPC_DTYPE_BF16}, {128, 7168}};

TEST(TensorCheck, AcceptsWhatTheRuleAsks) {
  EXPECT_EQ(status_of(tensor2(EPC_DTYPE_INT64, 100, 8), kTopkIdx), EPC_OK);
  EXPECT_EQ(status_of(tensor2(EPC_DTYPE_INT32, 0, 8, nullptr), kTopkIdx), EPC_OK);  // empty: NULL is fine
  EpcTensor strided = tensor2(EPC_DTYPE_BF16, 128, 7168);
  strided.strides[0] = 7168;
  strided.strides[1] = 1;
  EXPECT_EQ(status_of(strided, kX), EPC_OK);
}

TEST(TensorCheck, RejectsByNameWithTheRightStatus) {
  std::string msg;
  EXPECT_EQ(status_of(tensor2(EPC_DTYPE_FP32, 128, 7168), kX, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("tensor x has dtype fp32"), std::string::npos) << msg;
  EXPECT_EQ(status_of(tensor2(EPC_DTYPE_BF16, 127, 7168), kX, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("shape [127, 7168]; expected [128, 7168]"), std::string::npos) << msg;
  EXPECT_EQ(status_of(tensor2(EPC_DTYPE_BF16, 128, 7168, nullptr), kX, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("NULL data"), std::string::npos) << msg;
  void* misaligned = reinterpret_cast<void*>(uintptr_t{0x7f0000000004});
  EXPECT_EQ(status_of(tensor2(EPC_DTYPE_BF16, 128, 7168, misaligned), kX, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("16-byte aligned"), std::string::npos) << msg;
  EpcTensor strided = tensor2(EPC_DTYPE_BF16, 128, 7168);
  strided.strides[0] = 8192;
  strided.strides[1] = 1;
  EXPECT_EQ(status_of(strided, kX, &msg), EPC_ERR_UNSUPPORTED);
  EXPECT_NE(msg.find("not contiguous"), std::string::npos) << msg;
  EpcTensor past = tensor2(EPC_DTYPE_BF16, 128, 7168);
  past.shape[2] = 1;
  EXPECT_EQ(status_of(past, kX, &msg), EPC_ERR_INVALID_ARGUMENT);
  EpcTensor rank3 = tensor2(EPC_DTYPE_BF16, 128, 7168);
  rank3.ndim = -1;
  EXPECT_EQ(status_of(rank3, kX, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("-1 dimensions"), std::string::npos) << msg;
}

// Found by the tensor-check fuzz target (tests/fuzz/corpus/tensor-check/topk-idx-huge-*):
// a free extent was multiplied into an int64 element count unchecked, which overflowed
// (undefined behaviour) for B = 2^62 with K = 8 and wrapped to 0 elements, so such a tensor
// was accepted even with NULL data. Its size must fit in 64 bits, and NULL data with
// elements is refused whatever the extents.
TEST(TensorCheck, SizesThatOverflowAreRefused) {
  std::string msg;
  const int64_t huge = int64_t{1} << 62;
  EXPECT_EQ(status_of(tensor2(EPC_DTYPE_INT64, huge, 8, nullptr), kTopkIdx, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("does not fit in 64 bits"), std::string::npos) << msg;
  EXPECT_EQ(status_of(tensor2(EPC_DTYPE_INT64, huge, 8), kTopkIdx, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(tensor2(EPC_DTYPE_INT32, std::numeric_limits<int64_t>::max(), 8), kTopkIdx),
            EPC_ERR_INVALID_ARGUMENT);
  // The largest B whose int32 routing still fits in int64 bytes is accepted here (later
  // checks hold B to max_tokens_per_rank).
  EXPECT_EQ(status_of(tensor2(EPC_DTYPE_INT32, std::numeric_limits<int64_t>::max() / 32, 8), kTopkIdx), EPC_OK);
  EpcTensor row_major = tensor2(EPC_DTYPE_INT64, huge, 8);
  row_major.strides[0] = 8;
  row_major.strides[1] = 1;
  EXPECT_EQ(status_of(row_major, kTopkIdx), EPC_ERR_INVALID_ARGUMENT);
}

TEST(TensorCheck, EmptyTensorsWithHugeExtentsAreFine) {
  // No elements, so nothing is addressed: accepted with NULL data, and the stride check
  // (whose running product overflows past the zero extent) stops instead of overflowing.
  const int64_t huge = int64_t{1} << 62;
  const epc::TensorRule rule{"out_x", {EPC_DTYPE_BF16}, {0, huge, huge}};
  EpcTensor t{nullptr, EPC_DTYPE_BF16, 3, {0, huge, huge, 0}, {0, huge, 1, 0}};
  EXPECT_EQ(status_of(t, rule), EPC_OK);
}

}  // namespace

// fp8 dispatch scales (core/scale_output.cpp): the encodings and strides a grouped GEMM uses.
namespace {

EpcTensor scales3(EpcDtype dtype, int64_t experts, int64_t rows, int64_t words, int64_t s0 = 0, int64_t s1 = 0,
                  int64_t s2 = 0) {
  return EpcTensor{kDevice, dtype, 3, {experts, rows, words, 0}, {s0, s1, s2, 0}};
}

EpcStatus scale_status(const EpcTensor& t, epc::kernels::ScaleOutput* out, std::string* message = nullptr) {
  try {
    *out = epc::fp8_scale_output(&t, 4, 10, 56);
    return EPC_OK;
  } catch (const epc::Error& e) {
    if (message != nullptr) *message = e.what();
    return e.status();
  }
}

}  // namespace

TEST(ScaleOutput, EncodingsAndStridesAGroupedGemmUses) {
  epc::kernels::ScaleOutput out{};
  // fp32 row-major (all-zero strides): 2.0's format.
  ASSERT_EQ(scale_status(scales3(EPC_DTYPE_FP32, 4, 10, 56), &out), EPC_OK);
  EXPECT_EQ(out.encoding, epc::kernels::ScaleEncoding::kFp32);
  EXPECT_EQ(out.expert_stride, 560);
  EXPECT_EQ(out.row_stride, 56);
  EXPECT_EQ(out.word_stride, 1);
  // fp32 column-major over rows, rows padded to 12 (TMA: 16-byte columns).
  ASSERT_EQ(scale_status(scales3(EPC_DTYPE_FP32, 4, 10, 56, 56 * 12, 1, 12), &out), EPC_OK);
  EXPECT_EQ(out.row_stride, 1);
  EXPECT_EQ(out.word_stride, 12);
  // UE8M0 bytes, row-major.
  ASSERT_EQ(scale_status(scales3(EPC_DTYPE_E8M0, 4, 10, 56), &out), EPC_OK);
  EXPECT_EQ(out.encoding, epc::kernels::ScaleEncoding::kUe8m0);
  // UE8M0 packed four to a word: ceil(56 / 4) = 14 words, column-major, TMA-aligned.
  ASSERT_EQ(scale_status(scales3(EPC_DTYPE_E8M0X4, 4, 10, 14, 14 * 12, 1, 12), &out), EPC_OK);
  EXPECT_EQ(out.encoding, epc::kernels::ScaleEncoding::kUe8m0x4);
  EXPECT_EQ(out.expert_stride, 168);
}

// Every layout of a small 3-D tensor's strides against a brute-force test of whether two of
// its elements share an offset: check_strided_tensor accepts none that do (it may refuse
// interleavings that do not, which no scale layout uses).
TEST(StridedTensor, NoAcceptedStridesOverlap) {
  const int64_t shape[3] = {2, 3, 2};
  int accepted = 0;
  for (int64_t s0 = 1; s0 <= 8; ++s0) {
    for (int64_t s1 = 1; s1 <= 8; ++s1) {
      for (int64_t s2 = 1; s2 <= 8; ++s2) {
        const EpcTensor t{kDevice, EPC_DTYPE_FP32, 3, {shape[0], shape[1], shape[2], 0}, {s0, s1, s2, 0}};
        int64_t strides[EPC_TENSOR_MAX_DIMS] = {};
        bool ok = true;
        try {
          epc::check_strided_tensor(&t, {"t", {EPC_DTYPE_FP32}, {2, 3, 2}, 4}, strides);
        } catch (const epc::Error&) {
          ok = false;
        }
        if (!ok) continue;
        ++accepted;
        std::set<int64_t> offsets;
        for (int64_t a = 0; a < shape[0]; ++a) {
          for (int64_t b = 0; b < shape[1]; ++b) {
            for (int64_t c = 0; c < shape[2]; ++c) offsets.insert(a * s0 + b * s1 + c * s2);
          }
        }
        EXPECT_EQ(offsets.size(), 12u) << "strides " << s0 << ", " << s1 << ", " << s2 << " overlap";
      }
    }
  }
  EXPECT_GT(accepted, 0);
  // [5, 2, 1] puts (1, 0, 0) on (0, 2, 1); [6, 2, 1] is the row-major packing.
  int64_t strides[EPC_TENSOR_MAX_DIMS] = {};
  const EpcTensor overlapping{kDevice, EPC_DTYPE_FP32, 3, {2, 3, 2, 0}, {5, 2, 1, 0}};
  EXPECT_THROW(epc::check_strided_tensor(&overlapping, {"t", {EPC_DTYPE_FP32}, {2, 3, 2}, 4}, strides), epc::Error);
}

TEST(ScaleOutput, RefusesOverlapWrongShapesAndDtypes) {
  epc::kernels::ScaleOutput out{};
  std::string msg;
  // Column-major with a column shorter than the rows: elements overlap.
  EXPECT_EQ(scale_status(scales3(EPC_DTYPE_FP32, 4, 10, 56, 560, 1, 9), &out, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;
  // Experts closer together than one expert's block.
  EXPECT_EQ(scale_status(scales3(EPC_DTYPE_FP32, 4, 10, 56, 100, 1, 10), &out, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("dimension 0"), std::string::npos) << msg;
  // TMA-padded columns of 12 rows: an expert's block spans 12 * 55 + 10 = 670 elements, the
  // rows' and the columns' reach together; 661 to 669 would put expert 1's first scale on
  // expert 0's last column.
  for (int64_t expert_stride : {661, 664, 669}) {
    EXPECT_EQ(scale_status(scales3(EPC_DTYPE_FP32, 4, 10, 56, expert_stride, 1, 12), &out, &msg),
              EPC_ERR_INVALID_ARGUMENT)
        << expert_stride;
    EXPECT_NE(msg.find("at least 670 needed"), std::string::npos) << msg;
  }
  EXPECT_EQ(scale_status(scales3(EPC_DTYPE_FP32, 4, 10, 56, 670, 1, 12), &out, &msg), EPC_OK) << msg;
  // A zero or negative stride.
  EXPECT_EQ(scale_status(scales3(EPC_DTYPE_FP32, 4, 10, 56, 560, 0, 1), &out, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(scale_status(scales3(EPC_DTYPE_FP32, 4, 10, 56, 560, -56, 1), &out, &msg), EPC_ERR_INVALID_ARGUMENT);
  // Packed words: 14 per row, not 56.
  EXPECT_EQ(scale_status(scales3(EPC_DTYPE_E8M0X4, 4, 10, 56), &out, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("expected [4, 10, 14]"), std::string::npos) << msg;
  EXPECT_EQ(scale_status(scales3(EPC_DTYPE_BF16, 4, 10, 56), &out, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("has dtype bf16"), std::string::npos) << msg;
  // fp32 words must be 4-byte aligned; bytes need not be.
  EpcTensor odd = scales3(EPC_DTYPE_FP32, 4, 10, 56);
  odd.data = reinterpret_cast<void*>(uintptr_t{0x7f0000000002});
  EXPECT_EQ(scale_status(odd, &out, &msg), EPC_ERR_INVALID_ARGUMENT);
  odd.dtype = EPC_DTYPE_E8M0;
  EXPECT_EQ(scale_status(odd, &out, &msg), EPC_OK);
  // Strides that reach past 64 bits of bytes.
  EXPECT_EQ(scale_status(scales3(EPC_DTYPE_FP32, 4, 10, 56, int64_t{1} << 62, 56, 1), &out, &msg),
            EPC_ERR_INVALID_ARGUMENT);
}
