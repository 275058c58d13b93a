// SPDX-License-Identifier: Apache-2.0
// The fp8 cast's scales of a dispatch message that came as a line record
// (ll_dispatch_lines.cuh): store_cast_scales (scale_store.cuh) for fp32 scales that lie one
// per line word, each polled until it carries the step's epoch.
#pragma once

#include <cstdint>

#include "kernels/device/line_await.cuh"
#include "kernels/device/scale_store.cuh"

namespace epc::kernels {

// Words [begin, end) of the row's scales in E (kFp32, kUe8m0: one scale each; kUe8m0x4: four),
// from the `scales` line words at `src`, into every row at row_at[0, rows). False when a word
// did not come.
template <ScaleEncoding E>
__device__ __forceinline__ bool store_line_row_scales(const ScaleOutput& out, const uint64_t* src, int scales,
                                                      int begin, int end, int rows, const int64_t* row_at,
                                                      uint32_t epoch, const LineWait& wait, ScaleThread at) {
  constexpr int kPerWord = E == ScaleEncoding::kUe8m0x4 ? 4 : 1;
  struct ScaleWords {
    uint64_t w[4];
  };
  bool ok = true;
  for (int w = begin + at.thread; w < end && ok; w += at.threads) {
    // The word's scales load at once (0 past the row's last block, as load_scale_source); one
    // loop polls them again only when one was late.
    const uint64_t* first = src + w * kPerWord;
    const int count = scales - w * kPerWord < kPerWord ? scales - w * kPerWord : kPerWord;
    const auto load = [first, count] {
      ScaleWords words{};
#pragma unroll
      for (int k = 0; k < kPerWord; ++k) {
        if (k < count) words.w[k] = load_line_word(first + k);
      }
      return words;
    };
    const auto came = [epoch, count](const ScaleWords& words) {
      bool all = true;
#pragma unroll
      for (int k = 0; k < kPerWord; ++k) all = all && (k >= count || word_arrived(words.w[k], epoch));
      return all;
    };
    ScaleWords words = load();
    ok = came(words) || poll_until(load, came, &words, wait.timeout_ns, wait.error, wait.phase, wait.rank, wait.peer);
    store_scale_word<E>(out,
                        encode_scale_source<E>(make_uint4(word_data(words.w[0]), word_data(words.w[1]),
                                                          word_data(words.w[2]), word_data(words.w[3]))),
                        w, rows, row_at);
  }
  return ok;
}

__device__ __forceinline__ bool store_line_cast_scales(const ScaleOutput& out, const uint64_t* src, int scales,
                                                       int begin, int end, int rows, const int64_t* row_at,
                                                       uint32_t epoch, const LineWait& wait, ScaleThread at) {
  switch (out.encoding) {
    case ScaleEncoding::kUe8m0:
      return store_line_row_scales<ScaleEncoding::kUe8m0>(out, src, scales, begin, end, rows, row_at, epoch, wait, at);
    case ScaleEncoding::kUe8m0x4:
      return store_line_row_scales<ScaleEncoding::kUe8m0x4>(out, src, scales, begin, end, rows, row_at, epoch, wait,
                                                            at);
    default:
      return store_line_row_scales<ScaleEncoding::kFp32>(out, src, scales, begin, end, rows, row_at, epoch, wait, at);
  }
}

}  // namespace epc::kernels
