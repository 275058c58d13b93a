// SPDX-License-Identifier: Apache-2.0
// An environment variable set for an object's lifetime (an empty value unsets it), for tests
// of the planner's testing and tuning aids (core/env_count.hpp).
#pragma once

#include <cstdlib>

namespace epc::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (*value == '\0') {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

}  // namespace epc::test
