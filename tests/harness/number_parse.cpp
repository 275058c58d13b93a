// SPDX-License-Identifier: Apache-2.0
#include "number_parse.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace epc::harness {

bool parse_int_in_range(const std::string& text, long min, long max, int& out) {
  // strtol would skip leading blanks and accept a '+'; a digit-only check forbids both.
  const bool negative = !text.empty() && text[0] == '-';
  const std::size_t first_digit = negative ? 1 : 0;
  if (text.size() == first_digit) return false;
  for (std::size_t i = first_digit; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
  }
  errno = 0;
  const long value = std::strtol(text.c_str(), nullptr, 10);
  if (errno == ERANGE || value < min || value > max) return false;
  out = static_cast<int>(value);
  return true;
}

bool parse_seconds(const std::string& text, double& out) {
  // Plain decimal only: strtod alone would also take "inf", "nan", hex and exponents.
  if (text.empty()) return false;
  for (const char c : text) {
    if (!((c >= '0' && c <= '9') || c == '.')) return false;
  }
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (errno == ERANGE || end != text.c_str() + text.size()) return false;
  if (!std::isfinite(value) || value < 0) return false;
  out = value;
  return true;
}

}  // namespace epc::harness
