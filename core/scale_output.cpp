// SPDX-License-Identifier: Apache-2.0
#include "core/scale_output.hpp"

#include "core/error.hpp"
#include "core/tensor_check.hpp"

namespace epc {

namespace {

kernels::ScaleEncoding encoding_of(EpcDtype dtype) {
  switch (dtype) {
    case EPC_DTYPE_E8M0:
      return kernels::ScaleEncoding::kUe8m0;
    case EPC_DTYPE_E8M0X4:
      return kernels::ScaleEncoding::kUe8m0x4;
    default:  // FP32, or a dtype check_strided_tensor refuses naming the accepted ones
      return kernels::ScaleEncoding::kFp32;
  }
}

}  // namespace

kernels::ScaleOutput fp8_scale_output_rows(const EpcTensor* t, int64_t rows, int64_t scales) {
  if (t == nullptr) fail_argument("EpcDispatchArgs.out_scales is NULL; EPC_QUANT_FP8 needs it");
  kernels::ScaleOutput out{};
  out.encoding = encoding_of(t->dtype);
  const int64_t words = kernels::scale_words(out.encoding, static_cast<int>(scales));
  int64_t strides[2] = {0, 0};
  check_strided_tensor(t,
                       {"EpcDispatchArgs.out_scales",
                        {EPC_DTYPE_FP32, EPC_DTYPE_E8M0, EPC_DTYPE_E8M0X4},
                        {rows, words},
                        static_cast<uint32_t>(kernels::scale_word_bytes(out.encoding))},
                       strides);
  out.data = t->data;
  out.expert_stride = 0;
  out.row_stride = strides[0];
  out.word_stride = strides[1];
  return out;
}

kernels::ScaleOutput fp8_scale_output(const EpcTensor* t, int64_t experts, int64_t rows, int64_t scales) {
  if (t == nullptr) fail_argument("EpcDispatchArgs.out_scales is NULL; EPC_QUANT_FP8 needs it");
  kernels::ScaleOutput out{};
  switch (t->dtype) {
    case EPC_DTYPE_E8M0:
      out.encoding = kernels::ScaleEncoding::kUe8m0;
      break;
    case EPC_DTYPE_E8M0X4:
      out.encoding = kernels::ScaleEncoding::kUe8m0x4;
      break;
    default:  // FP32, or a dtype check_strided_tensor refuses naming the accepted ones
      out.encoding = kernels::ScaleEncoding::kFp32;
      break;
  }
  const int64_t words = kernels::scale_words(out.encoding, static_cast<int>(scales));
  int64_t strides[3] = {0, 0, 0};
  check_strided_tensor(t,
                       {"EpcDispatchArgs.out_scales",
                        {EPC_DTYPE_FP32, EPC_DTYPE_E8M0, EPC_DTYPE_E8M0X4},
                        {experts, rows, words},
                        static_cast<uint32_t>(kernels::scale_word_bytes(out.encoding))},
                       strides);
  out.data = t->data;
  out.expert_stride = strides[0];
  out.row_stride = strides[1];
  out.word_stride = strides[2];
  return out;
}

}  // namespace epc
