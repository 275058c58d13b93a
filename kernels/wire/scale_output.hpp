// SPDX-License-Identifier: Apache-2.0
// Where and how a dispatch writes each received row's scales (EpcDispatchArgs.out_scales):
// the encoding its dtype names (the fp8 cast's scales, or a passthrough's elements copied as
// they are) and the element strides its descriptor gives, so a grouped GEMM's scale layout
// (column-major over tokens, rows padded for TMA, UE8M0 packed four to a word) is written in
// place. One struct shared by the core, which validates the tensor, and the receiving
// kernels, which store into it.
#pragma once

#include <cstdint>

namespace epc::kernels {

enum class ScaleEncoding : int32_t {
  kFp32 = 0,     // a 32-bit word as it is: the cast's fp32 scale, or a passthrough element
                 // of 4 bytes (fp32, int32, E8M0X4, ...)
  kUe8m0 = 1,    // one byte: the exponent of a power-of-two scale, biased by 127
  kUe8m0x4 = 2,  // four such bytes in a 32-bit word, scale blocks 4w .. 4w+3, lowest byte
                 // first; bytes past the row's last block are 0
  kRaw8 = 3,     // passthrough: a 1-byte element as it is (E8M0, uint8, e4m3, ...)
  kRaw16 = 4,    // passthrough: a 2-byte element as it is (bf16, fp16)
};

// Bytes of one stored element (a word of kUe8m0x4).
constexpr int scale_word_bytes(ScaleEncoding e) {
  return e == ScaleEncoding::kUe8m0 || e == ScaleEncoding::kRaw8 ? 1 : e == ScaleEncoding::kRaw16 ? 2 : 4;
}

// Stored elements per row for `scales` scale blocks (passthrough: elements).
constexpr int scale_words(ScaleEncoding e, int scales) {
  return e == ScaleEncoding::kUe8m0x4 ? (scales + 3) / 4 : scales;
}

// out_scales of an expert-major output [experts, rows, words]: element (e, r, w) is at
// data + (e * expert_stride + r * row_stride + w * word_stride) * scale_word_bytes.
struct ScaleOutput {
  void* data;  // null when the dispatch carries no scales
  int64_t expert_stride;
  int64_t row_stride;
  int64_t word_stride;
  ScaleEncoding encoding;
};

}  // namespace epc::kernels
