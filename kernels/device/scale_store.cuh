// SPDX-License-Identifier: Apache-2.0
// Stores one row's scales into a dispatch's out_scales in the encoding and strides it
// names (kernels/wire/scale_output.hpp). The fp8 cast's scales arrive as fp32; UE8M0
// encodings need power-of-two values, which the send kernel's rounding guarantees (its
// exponent byte is then the fp32 exponent field). A passthrough's elements (1, 2 or 4
// bytes) arrive as the caller made them and are stored as they are.
#pragma once

#include <cstdint>

#include "kernels/wire/scale_output.hpp"

namespace epc::kernels {

// Element `word` of a row of `scales` scales at `row` (fp32, or the passthrough's elements),
// encoded as E (bit pattern, in the low bits).
template <ScaleEncoding E>
__device__ __forceinline__ uint32_t encode_scale_word(const void* row, int word, int scales) {
  const float* fp32 = static_cast<const float*>(row);
  if (E == ScaleEncoding::kFp32) return __float_as_uint(fp32[word]);
  if (E == ScaleEncoding::kUe8m0) return __float_as_uint(fp32[word]) >> 23;
  if (E == ScaleEncoding::kRaw8) return static_cast<const uint8_t*>(row)[word];
  if (E == ScaleEncoding::kRaw16) return static_cast<const uint16_t*>(row)[word];
  uint32_t packed = 0;
  for (int b = 0; b < 4; ++b) {
    const int block = word * 4 + b;
    if (block < scales) packed |= (__float_as_uint(fp32[block]) >> 23) << (8 * b);
  }
  return packed;
}

// One received row's scales `src` (`scales` of them), words [begin, end) of them split over
// the block's threads, stored into every row that row feeds: `rows` of them, whose scales
// start at elements row_at[j] (negative: the entry did not fit, nothing is stored). The
// encoding is a template parameter so the loop holds no per-store branch.
template <ScaleEncoding E>
__device__ __forceinline__ void store_row_scales(const ScaleOutput& out, const void* src, int scales, int begin,
                                                 int end, int rows, const int64_t* row_at) {
  for (int w = begin + static_cast<int>(threadIdx.x); w < end; w += static_cast<int>(blockDim.x)) {
    const uint32_t value = encode_scale_word<E>(src, w, scales);
    const int64_t offset = w * out.word_stride;
    for (int j = 0; j < rows; ++j) {
      if (row_at[j] < 0) continue;
      if (scale_word_bytes(E) == 1) {
        static_cast<uint8_t*>(out.data)[row_at[j] + offset] = static_cast<uint8_t>(value);
      } else if (scale_word_bytes(E) == 2) {
        static_cast<uint16_t*>(out.data)[row_at[j] + offset] = static_cast<uint16_t>(value);
      } else {
        static_cast<uint32_t*>(out.data)[row_at[j] + offset] = value;
      }
    }
  }
}

// store_row_scales of the fp8 cast's fp32 scales in out's encoding (kFp32, kUe8m0, kUe8m0x4).
__device__ __forceinline__ void store_cast_scales(const ScaleOutput& out, const float* src, int scales, int begin,
                                                  int end, int rows, const int64_t* row_at) {
  switch (out.encoding) {
    case ScaleEncoding::kUe8m0:
      store_row_scales<ScaleEncoding::kUe8m0>(out, src, scales, begin, end, rows, row_at);
      break;
    case ScaleEncoding::kUe8m0x4:
      store_row_scales<ScaleEncoding::kUe8m0x4>(out, src, scales, begin, end, rows, row_at);
      break;
    default:
      store_row_scales<ScaleEncoding::kFp32>(out, src, scales, begin, end, rows, row_at);
      break;
  }
}

// store_row_scales of a passthrough's elements as they are, by their size (kRaw8, kRaw16,
// kFp32: a 32-bit word).
__device__ __forceinline__ void store_copied_scales(const ScaleOutput& out, const void* src, int scales, int begin,
                                                    int end, int rows, const int64_t* row_at) {
  switch (out.encoding) {
    case ScaleEncoding::kRaw8:
      store_row_scales<ScaleEncoding::kRaw8>(out, src, scales, begin, end, rows, row_at);
      break;
    case ScaleEncoding::kRaw16:
      store_row_scales<ScaleEncoding::kRaw16>(out, src, scales, begin, end, rows, row_at);
      break;
    default:
      store_row_scales<ScaleEncoding::kFp32>(out, src, scales, begin, end, rows, row_at);
      break;
  }
}

}  // namespace epc::kernels
