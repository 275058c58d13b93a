// SPDX-License-Identifier: Apache-2.0
#include "tests/reference/reference_scales.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace epc::ref {
namespace {

uint32_t e8m0_of(float scale) {
  uint32_t bits = 0;
  std::memcpy(&bits, &scale, sizeof bits);
  const uint32_t exponent = bits >> 23;
  if ((bits & 0x7FFFFFu) != 0 || exponent == 0 || exponent >= 255) {
    throw std::invalid_argument("e8m0 scales must be positive normal powers of two; got " + std::to_string(scale));
  }
  return exponent;
}

}  // namespace

int scale_words(ScaleEncoding encoding, int scales) {
  return encoding == ScaleEncoding::kE8m0x4 ? (scales + 3) / 4 : scales;
}

std::vector<uint32_t> encode_scales(const std::vector<float>& values, int rows, int scales, ScaleEncoding encoding) {
  if (values.size() != static_cast<size_t>(rows) * static_cast<size_t>(scales)) {
    throw std::invalid_argument("encode_scales: values must hold rows * scales floats");
  }
  const int words = scale_words(encoding, scales);
  std::vector<uint32_t> out(static_cast<size_t>(rows) * static_cast<size_t>(words), 0);
  for (int r = 0; r < rows; ++r) {
    const float* row = values.data() + static_cast<size_t>(r) * scales;
    uint32_t* dst = out.data() + static_cast<size_t>(r) * words;
    for (int k = 0; k < scales; ++k) {
      switch (encoding) {
        case ScaleEncoding::kFp32:
          std::memcpy(&dst[k], &row[k], sizeof(float));
          break;
        case ScaleEncoding::kE8m0:
          dst[k] = e8m0_of(row[k]);
          break;
        case ScaleEncoding::kE8m0x4:
          dst[k / 4] |= e8m0_of(row[k]) << (8 * (k % 4));
          break;
      }
    }
  }
  return out;
}

}  // namespace epc::ref
