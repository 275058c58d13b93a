// SPDX-License-Identifier: Apache-2.0
#include "core/env_count.hpp"

#include <cerrno>
#include <cstdlib>

#include "core/error.hpp"

namespace epc {

uint32_t env_count(const char* name, uint32_t fallback, uint32_t most) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] < '0' || text[0] > '9' || value > most) {
    fail_argument(format("the environment variable %s is '%s'; it must be a number from 0 to %u", name, text, most));
  }
  return static_cast<uint32_t>(value);
}

}  // namespace epc
