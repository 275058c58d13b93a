// SPDX-License-Identifier: Apache-2.0
#include "core/error.hpp"

#include <cstdarg>
#include <cstdio>

namespace epc {

namespace {

std::string vformat(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int needed = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out;
  if (needed > 0) {
    out.resize(static_cast<size_t>(needed) + 1);
    std::vsnprintf(&out[0], out.size(), fmt, args);
    out.resize(static_cast<size_t>(needed));
  }
  return out;
}

}  // namespace

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string out;
  try {
    out = vformat(fmt, args);
  } catch (...) {
    va_end(args);
    throw;
  }
  va_end(args);
  return out;
}

std::string format_noexcept(const char* fmt, ...) noexcept {
  va_list args;
  va_start(args, fmt);
  std::string out;
  try {
    out = vformat(fmt, args);
  } catch (...) {
    out = "out of memory";  // within the short-string buffer: no allocation
  }
  va_end(args);
  return out;
}

void fail(EpcStatus status, const std::string& message) { throw Error(status, message); }

}  // namespace epc
