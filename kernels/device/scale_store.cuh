// SPDX-License-Identifier: Apache-2.0
// Stores one row's scales into a dispatch's out_scales in the encoding and strides it
// names (kernels/wire/scale_output.hpp). The scales arrive as fp32; UE8M0 encodings need
// power-of-two values, which the send kernel's rounding guarantees (its exponent byte is
// then the fp32 exponent field).
#pragma once

#include <cstdint>

#include "kernels/wire/scale_output.hpp"

namespace epc::kernels {

// Element `word` of a row of `scales` fp32 scales, encoded as `e` (bit pattern; kUe8m0 in
// the low byte).
__device__ __forceinline__ uint32_t encode_scale_word(const float* row, int word, int scales, ScaleEncoding e) {
  if (e == ScaleEncoding::kFp32) return __float_as_uint(row[word]);
  if (e == ScaleEncoding::kUe8m0) return __float_as_uint(row[word]) >> 23;
  uint32_t packed = 0;
  for (int b = 0; b < 4; ++b) {
    const int block = word * 4 + b;
    if (block < scales) packed |= (__float_as_uint(row[block]) >> 23) << (8 * b);
  }
  return packed;
}

__device__ __forceinline__ void store_scale_word(const ScaleOutput& out, int64_t expert, int64_t row, int word,
                                                 uint32_t value) {
  const int64_t at = expert * out.expert_stride + row * out.row_stride + word * out.word_stride;
  if (out.encoding == ScaleEncoding::kUe8m0) {
    static_cast<uint8_t*>(out.data)[at] = static_cast<uint8_t>(value);
  } else {
    static_cast<uint32_t*>(out.data)[at] = value;
  }
}

}  // namespace epc::kernels
