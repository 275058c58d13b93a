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

// Ends a va_list when its function returns or throws.
struct VaEnd {
  va_list& args;
  ~VaEnd() { va_end(args); }
};

}  // namespace

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  const VaEnd end{args};
  return vformat(fmt, args);
}

std::string format_noexcept(const char* fmt, ...) noexcept {
  va_list args;
  va_start(args, fmt);
  const VaEnd end{args};
  try {
    return vformat(fmt, args);
  } catch (...) {
    return "out of memory";  // within the short-string buffer: no allocation
  }
}

void fail(EpcStatus status, const std::string& message) { throw Error(status, message); }

}  // namespace epc
