// SPDX-License-Identifier: Apache-2.0
// What a host-side check did with a call: the status of the epc::Error it threw (EPC_OK when
// none) and its message, and the expectation the ABI tests state on it.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "core/error.hpp"

namespace epc::test {

struct Outcome {
  EpcStatus status = EPC_OK;
  std::string message;
};

inline Outcome run(const std::function<void()>& call) {
  Outcome o;
  try {
    call();
  } catch (const epc::Error& e) {
    o.status = e.status();
    o.message = e.what();
  }
  return o;
}

// The status, and a message naming every part.
inline void expect_outcome(const Outcome& o, EpcStatus status, std::initializer_list<const char*> parts,
                           const char* what) {
  EXPECT_EQ(o.status, status) << what << ": " << o.message;
  for (const char* part : parts) EXPECT_NE(o.message.find(part), std::string::npos) << what << ": " << o.message;
}

}  // namespace epc::test
