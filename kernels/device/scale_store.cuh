// SPDX-License-Identifier: Apache-2.0
// Stores one row's scales into a dispatch's out_scales in the encoding and strides it
// names (kernels/wire/scale_output.hpp). The fp8 cast's scales arrive as fp32; UE8M0
// encodings need power-of-two values, which the send kernel's rounding guarantees (its
// exponent byte is then the fp32 exponent field). A passthrough's elements (1, 2 or 4
// bytes) arrive as the caller made them and are stored as they are.
#pragma once

#include <cstdint>

#include "kernels/device/warp.cuh"
#include "kernels/wire/scale_output.hpp"

namespace epc::kernels {

// The source bytes element `word` of a row of `scales` scales at `row` is made of, loaded
// apart from its encoding so that a receiver can issue the loads early (prefetch_row_scales):
// one fp32 scale (four for kUe8m0x4, 0 past the row's last block) or one element.
template <ScaleEncoding E>
__device__ __forceinline__ uint4 load_scale_source(const void* row, int word, int scales) {
  uint4 raw = make_uint4(0, 0, 0, 0);
  if (E == ScaleEncoding::kUe8m0x4) {
    const uint32_t* fp32 = static_cast<const uint32_t*>(row);
    const int block = word * 4;
    if (block < scales) raw.x = fp32[block];
    if (block + 1 < scales) raw.y = fp32[block + 1];
    if (block + 2 < scales) raw.z = fp32[block + 2];
    if (block + 3 < scales) raw.w = fp32[block + 3];
  } else if (E == ScaleEncoding::kRaw8) {
    raw.x = static_cast<const uint8_t*>(row)[word];
  } else if (E == ScaleEncoding::kRaw16) {
    raw.x = static_cast<const uint16_t*>(row)[word];
  } else {
    raw.x = static_cast<const uint32_t*>(row)[word];
  }
  return raw;
}

// The element load_scale_source loaded, encoded as E (bit pattern, in the low bits).
template <ScaleEncoding E>
__device__ __forceinline__ uint32_t encode_scale_source(uint4 raw) {
  if (E == ScaleEncoding::kUe8m0) return raw.x >> 23;
  if (E == ScaleEncoding::kUe8m0x4) {
    return (raw.x >> 23) | ((raw.y >> 23) << 8) | ((raw.z >> 23) << 16) | ((raw.w >> 23) << 24);
  }
  return raw.x;
}

// Which threads of a block store a row's scales: `thread` is this one's index among them
// (numbered from the block's last thread down, so that the scales go from warps other than
// the first ones, which store the row's payload at small steps), `threads` their count.
struct ScaleThread {
  int thread, threads;
  __device__ static ScaleThread from_block_end() {
    return {static_cast<int>(blockDim.x - 1 - threadIdx.x), static_cast<int>(blockDim.x)};
  }
};

// `value` (encoded as E) as the scale word at element `at` of out.
template <ScaleEncoding E>
__device__ __forceinline__ void store_scale_word_at(const ScaleOutput& out, uint32_t value, int64_t at) {
  if (scale_word_bytes(E) == 1) {
    static_cast<uint8_t*>(out.data)[at] = static_cast<uint8_t>(value);
  } else if (scale_word_bytes(E) == 2) {
    static_cast<uint16_t*>(out.data)[at] = static_cast<uint16_t>(value);
  } else {
    static_cast<uint32_t*>(out.data)[at] = value;
  }
}

// Word w of a row's scales, `value` (encoded as E), into every row at row_at[0, rows)
// (negative: the entry did not fit, nothing is stored).
template <ScaleEncoding E>
__device__ __forceinline__ void store_scale_word(const ScaleOutput& out, uint32_t value, int w, int rows,
                                                 const int64_t* row_at) {
  const int64_t offset = w * out.word_stride;
  for (int j = 0; j < rows; ++j) {
    if (row_at[j] >= 0) store_scale_word_at<E>(out, value, row_at[j] + offset);
  }
}

// The same by lanes sharing the rows out: this one stores rows first, first + step, ... A
// lane makes a turn or two, so the loop stays rolled: unrolled, it only made the kernel larger,
// and a launch's time on few tokens is mostly the fetch of its code
// (bench/results/ll_alone_code_1xh200.md).
template <ScaleEncoding E>
__device__ __forceinline__ void store_scale_word_shared(const ScaleOutput& out, uint32_t value, int w, int rows,
                                                        const int64_t* row_at, int first, int step) {
  const int64_t offset = w * out.word_stride;
#pragma unroll 1
  for (int j = first; j < rows; j += step) {
    if (row_at[j] >= 0) store_scale_word_at<E>(out, value, row_at[j] + offset);
  }
}

// One received row's scales `src` (`scales` of them), words [begin, end) of them split over
// the block's threads (`at`), stored into every row that row feeds: `rows` of them, whose
// scales start at elements row_at[j] (negative: the entry did not fit, nothing is stored).
// `first` is this thread's first word's source, from prefetch_row_scales. The encoding is a
// template parameter so the loop holds no per-store branch.
template <ScaleEncoding E>
__device__ __forceinline__ void store_row_scales(const ScaleOutput& out, const void* src, int scales, int begin,
                                                 int end, int rows, const int64_t* row_at, uint4 first,
                                                 ScaleThread at) {
  const int first_word = begin + at.thread;
  for (int w = first_word; w < end; w += at.threads) {
    store_scale_word<E>(out, encode_scale_source<E>(w == first_word ? first : load_scale_source<E>(src, w, scales)), w,
                        rows, row_at);
  }
}

// This thread's first word of store_row_scales (begin + at.thread, if below end), loaded for
// `encoding`: issued before the received row is placed, its latency overlaps the placing.
__device__ __forceinline__ uint4 prefetch_row_scales(ScaleEncoding encoding, const void* src, int scales, int begin,
                                                     int end, ScaleThread at) {
  const int w = begin + at.thread;
  if (w >= end) return make_uint4(0, 0, 0, 0);
  switch (encoding) {
    case ScaleEncoding::kUe8m0x4:
      return load_scale_source<ScaleEncoding::kUe8m0x4>(src, w, scales);
    case ScaleEncoding::kRaw8:
      return load_scale_source<ScaleEncoding::kRaw8>(src, w, scales);
    case ScaleEncoding::kRaw16:
      return load_scale_source<ScaleEncoding::kRaw16>(src, w, scales);
    default:  // kFp32, kUe8m0: one 32-bit word
      return load_scale_source<ScaleEncoding::kFp32>(src, w, scales);
  }
}

// store_row_scales of the fp8 cast's fp32 scales in out's encoding (kFp32, kUe8m0, kUe8m0x4).
__device__ __forceinline__ void store_cast_scales(const ScaleOutput& out, const float* src, int scales, int begin,
                                                  int end, int rows, const int64_t* row_at, uint4 first,
                                                  ScaleThread at) {
  switch (out.encoding) {
    case ScaleEncoding::kUe8m0:
      store_row_scales<ScaleEncoding::kUe8m0>(out, src, scales, begin, end, rows, row_at, first, at);
      break;
    case ScaleEncoding::kUe8m0x4:
      store_row_scales<ScaleEncoding::kUe8m0x4>(out, src, scales, begin, end, rows, row_at, first, at);
      break;
    default:
      store_row_scales<ScaleEncoding::kFp32>(out, src, scales, begin, end, rows, row_at, first, at);
      break;
  }
}

// The fp8 cast's scales stored by the lanes that computed them, called by a whole warp whose
// 32 lanes hold the vectors of four consecutive blocks of a row, the first block a multiple of
// four (lane l: block `block` = first + l / 8, fp32 scale `scale`, the same in its block's
// lanes; `valid`: the block is in the row), in out's encoding (kFp32, kUe8m0, kUe8m0x4) into
// every row at row_at[0, rows). The lanes holding a word share its rows out (lane k of them
// stores rows k, k + 8, ... of a block's scale; lane k of the warp rows k, k + 32, ... of a
// packed word), so that no lane stores into every row one after the other.
template <ScaleEncoding E>
__device__ __forceinline__ void warp_store_block_scales(const ScaleOutput& out, float scale, int block, bool valid,
                                                        int rows, const int64_t* row_at) {
  constexpr int kLanesPerBlock = kWarpSize / 4;
  const uint32_t bits = valid ? __float_as_uint(scale) : 0u;  // 0 past the row's last block
  if (E == ScaleEncoding::kUe8m0x4) {
    // Each block's exponent byte in its place in the word, OR-ed over the warp in one step.
    const int byte = lane_id() / kLanesPerBlock;
    const uint32_t word = __reduce_or_sync(0xffffffffu, (bits >> 23) << (8 * byte));
    // The word exists when its first block is in the row: the row's blocks are a prefix.
    if (__any_sync(0xffffffffu, valid)) {
      store_scale_word_shared<E>(out, word, block / 4, rows, row_at, lane_id(), kWarpSize);
    }
  } else if (valid) {
    store_scale_word_shared<E>(out, encode_scale_source<E>(make_uint4(bits, 0, 0, 0)), block, rows, row_at,
                               lane_id() % kLanesPerBlock, kLanesPerBlock);
  }
}

// warp_store_block_scales in out's encoding.
__device__ __forceinline__ void warp_store_cast_scales(const ScaleOutput& out, float scale, int block, bool valid,
                                                       int rows, const int64_t* row_at) {
  switch (out.encoding) {
    case ScaleEncoding::kUe8m0:
      warp_store_block_scales<ScaleEncoding::kUe8m0>(out, scale, block, valid, rows, row_at);
      break;
    case ScaleEncoding::kUe8m0x4:
      warp_store_block_scales<ScaleEncoding::kUe8m0x4>(out, scale, block, valid, rows, row_at);
      break;
    default:
      warp_store_block_scales<ScaleEncoding::kFp32>(out, scale, block, valid, rows, row_at);
      break;
  }
}

// store_row_scales of a passthrough's elements as they are, by their size (kRaw8, kRaw16,
// kFp32: a 32-bit word).
__device__ __forceinline__ void store_copied_scales(const ScaleOutput& out, const void* src, int scales, int begin,
                                                    int end, int rows, const int64_t* row_at, uint4 first,
                                                    ScaleThread at) {
  switch (out.encoding) {
    case ScaleEncoding::kRaw8:
      store_row_scales<ScaleEncoding::kRaw8>(out, src, scales, begin, end, rows, row_at, first, at);
      break;
    case ScaleEncoding::kRaw16:
      store_row_scales<ScaleEncoding::kRaw16>(out, src, scales, begin, end, rows, row_at, first, at);
      break;
    default:
      store_row_scales<ScaleEncoding::kFp32>(out, src, scales, begin, end, rows, row_at, first, at);
      break;
  }
}

}  // namespace epc::kernels
