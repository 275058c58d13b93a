// SPDX-License-Identifier: Apache-2.0
// Errors inside the C++ core. Core code reports a failure by throwing epc::Error with the
// status the C ABI should return and a message for the caller; only capi/ catches it.
#pragma once

#include <stdexcept>
#include <string>

#include "epcomm/epcomm.h"

namespace epc {

class Error : public std::runtime_error {
 public:
  Error(EpcStatus status, const std::string& message) : std::runtime_error(message), status_(status) {}
  EpcStatus status() const noexcept { return status_; }

 private:
  EpcStatus status_;
};

// printf-style message builder, so call sites stay one line.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// format() for release paths, which may not throw: when the message's memory cannot be had,
// it is "out of memory" (short enough to need none).
std::string format_noexcept(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));

[[noreturn]] void fail(EpcStatus status, const std::string& message);

// Shorthand for the most common failure: a caller's argument is not acceptable.
[[noreturn]] inline void fail_argument(const std::string& message) { fail(EPC_ERR_INVALID_ARGUMENT, message); }
[[noreturn]] inline void fail_unsupported(const std::string& message) { fail(EPC_ERR_UNSUPPORTED, message); }
[[noreturn]] inline void fail_usage(const std::string& message) { fail(EPC_ERR_INVALID_USAGE, message); }

}  // namespace epc
