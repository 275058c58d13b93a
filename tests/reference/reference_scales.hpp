// SPDX-License-Identifier: Apache-2.0
// How a dispatch that casts to fp8 encodes the per-128-channel scales of ll_dispatch
// (LlDispatchResult::fp8_scales) into out_scales, by its dtype (EpcDispatchArgs.out_scales):
//   fp32     the scale's fp32 bits;
//   e8m0     one byte per scale: its fp32 exponent field (bits >> 23), 127 + log2(scale); the
//            scale must be a power of two (the cast rounds it up to one whenever out_scales
//            is e8m0 or e8m0x4, as LlDispatchOptions::round_scale_ue8m0 does);
//   e8m0x4   ceil(S / 4) 32-bit words per row; word w holds the e8m0 bytes of scales 4w ..
//            4w + 3, lowest byte first, and 0 in the bytes past the last scale.
// Where each element lies is the caller's strides; only the rows a dispatch writes are
// written (the others, and gaps between strided elements, keep their bytes).
#pragma once

#include <cstdint>
#include <vector>

namespace epc::ref {

enum class ScaleEncoding { kFp32, kE8m0, kE8m0x4 };

// Elements per row of `scales` scales in `encoding`.
int scale_words(ScaleEncoding encoding, int scales);

// Encodes `rows` x `scales` fp32 scales (row-major) as [rows, scale_words] elements, each a
// 32-bit value (e8m0: the byte in the low 8 bits). Throws std::invalid_argument for a
// scale an e8m0 encoding cannot hold exactly (not a positive normal power of two).
std::vector<uint32_t> encode_scales(const std::vector<float>& values, int rows, int scales, ScaleEncoding encoding);

}  // namespace epc::ref
