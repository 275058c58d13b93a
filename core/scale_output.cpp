// SPDX-License-Identifier: Apache-2.0
#include "core/scale_output.hpp"

#include <initializer_list>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/tensor_check.hpp"

namespace epc {

namespace {

constexpr const char* kField = "EpcDispatchArgs.out_scales";

kernels::ScaleEncoding cast_encoding(EpcDtype dtype) {
  switch (dtype) {
    case EPC_DTYPE_E8M0:
      return kernels::ScaleEncoding::kUe8m0;
    case EPC_DTYPE_E8M0X4:
      return kernels::ScaleEncoding::kUe8m0x4;
    default:  // FP32, or a dtype check_strided_tensor refuses naming the accepted ones
      return kernels::ScaleEncoding::kFp32;
  }
}

// A passthrough element moves as it is: only its size matters.
kernels::ScaleEncoding copy_encoding(EpcDtype dtype) {
  switch (dtype_size(dtype)) {
    case 1:
      return kernels::ScaleEncoding::kRaw8;
    case 2:
      return kernels::ScaleEncoding::kRaw16;
    case 4:
      return kernels::ScaleEncoding::kFp32;
    default:
      fail_unsupported(
          format("EpcDispatchArgs.x_scales has dtype %s; low-latency groups copy scale elements of 1, 2 or 4 bytes "
                 "in ABI %d.%d",
                 dtype_name(dtype), EPC_ABI_MAJOR, EPC_ABI_MINOR));
  }
}

// out_scales of `dtypes` (needed by `quant`), [experts, rows, words] or, with experts < 0,
// [rows, words], in `encoding`.
kernels::ScaleOutput strided_scales(const EpcTensor* t, const char* quant, kernels::ScaleEncoding encoding,
                                    std::initializer_list<EpcDtype> dtypes, int64_t experts, int64_t rows,
                                    int64_t scales) {
  if (t == nullptr) fail_argument(format("%s is NULL; %s needs it", kField, quant));
  const int64_t words = kernels::scale_words(encoding, static_cast<int>(scales));
  const auto element = static_cast<uint32_t>(kernels::scale_word_bytes(encoding));
  int64_t strides[3] = {0, 0, 0};
  kernels::ScaleOutput out{};
  out.encoding = encoding;
  out.data = t->data;
  if (experts < 0) {
    check_strided_tensor(t, {kField, dtypes, {rows, words}, element}, strides);
    out.row_stride = strides[0];
    out.word_stride = strides[1];
  } else {
    check_strided_tensor(t, {kField, dtypes, {experts, rows, words}, element}, strides);
    out.expert_stride = strides[0];
    out.row_stride = strides[1];
    out.word_stride = strides[2];
  }
  return out;
}

constexpr const char* kFp8 = "EPC_QUANT_FP8";
constexpr const char* kPassthrough = "EPC_QUANT_PASSTHROUGH";

}  // namespace

kernels::ScaleOutput fp8_scale_output_rows(const EpcTensor* t, int64_t rows, int64_t scales) {
  const kernels::ScaleEncoding e = t != nullptr ? cast_encoding(t->dtype) : kernels::ScaleEncoding::kFp32;
  return strided_scales(t, kFp8, e, {EPC_DTYPE_FP32, EPC_DTYPE_E8M0, EPC_DTYPE_E8M0X4}, -1, rows, scales);
}

kernels::ScaleOutput fp8_scale_output(const EpcTensor* t, int64_t experts, int64_t rows, int64_t scales) {
  const kernels::ScaleEncoding e = t != nullptr ? cast_encoding(t->dtype) : kernels::ScaleEncoding::kFp32;
  return strided_scales(t, kFp8, e, {EPC_DTYPE_FP32, EPC_DTYPE_E8M0, EPC_DTYPE_E8M0X4}, experts, rows, scales);
}

kernels::ScaleOutput passthrough_scale_output(const EpcTensor* t, EpcDtype dtype, int64_t experts, int64_t rows,
                                              int64_t scales) {
  return strided_scales(t, kPassthrough, copy_encoding(dtype), {dtype}, experts, rows, scales);
}

kernels::ScaleOutput passthrough_scale_output_rows(const EpcTensor* t, EpcDtype dtype, int64_t rows, int64_t scales) {
  return strided_scales(t, kPassthrough, copy_encoding(dtype), {dtype}, -1, rows, scales);
}

}  // namespace epc
