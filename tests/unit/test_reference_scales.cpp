// SPDX-License-Identifier: Apache-2.0
// The reference model's scale encodings (tests/reference/reference_scales.hpp), with every
// expected word derived by hand in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "tests/reference/reference_scales.hpp"

namespace epc::ref {
namespace {

TEST(ReferenceScales, WordsPerRow) {
  EXPECT_EQ(scale_words(ScaleEncoding::kFp32, 56), 56);
  EXPECT_EQ(scale_words(ScaleEncoding::kE8m0, 56), 56);
  EXPECT_EQ(scale_words(ScaleEncoding::kE8m0x4, 56), 14);
  EXPECT_EQ(scale_words(ScaleEncoding::kE8m0x4, 5), 2);
}

TEST(ReferenceScales, EncodesByHand) {
  // Two rows of five scales: 1 (2^0, byte 127), 0.5 (126), 2^-10 (117), 4 (129), 0.25 (125);
  // then 2^-22 (105), 8 (130), 1 (127), 2 (128), 2^-1 (126).
  const std::vector<float> values = {1.0f, 0.5f, std::ldexp(1.0f, -10), 4.0f, 0.25f, std::ldexp(1.0f, -22), 8.0f, 1.0f,
                                     2.0f, 0.5f};
  const std::vector<uint32_t> bytes = encode_scales(values, 2, 5, ScaleEncoding::kE8m0);
  EXPECT_EQ(bytes, (std::vector<uint32_t>{127, 126, 117, 129, 125, 105, 130, 127, 128, 126}));
  // Packed: word 0 = 127 | 126 << 8 | 117 << 16 | 129 << 24; word 1 = 125 and zero bytes.
  const std::vector<uint32_t> packed = encode_scales(values, 2, 5, ScaleEncoding::kE8m0x4);
  EXPECT_EQ(packed, (std::vector<uint32_t>{0x81757E7Fu, 0x7Du, 0x807F8269u, 0x7Eu}));
  // fp32: the bits themselves (1.0f is 0x3F800000).
  const std::vector<uint32_t> bits = encode_scales({1.0f, 0.3f}, 1, 2, ScaleEncoding::kFp32);
  EXPECT_EQ(bits[0], 0x3F800000u);
  EXPECT_EQ(bits[1], 0x3E99999Au);
}

TEST(ReferenceScales, E8m0RefusesWhatItCannotHold) {
  EXPECT_THROW(encode_scales({0.3f}, 1, 1, ScaleEncoding::kE8m0), std::invalid_argument);
  EXPECT_THROW(encode_scales({0.0f}, 1, 1, ScaleEncoding::kE8m0x4), std::invalid_argument);
  EXPECT_THROW(encode_scales({-1.0f}, 1, 1, ScaleEncoding::kE8m0), std::invalid_argument);
  EXPECT_THROW(encode_scales({1.0f}, 1, 2, ScaleEncoding::kFp32), std::invalid_argument);  // size mismatch
}

}  // namespace
}  // namespace epc::ref
