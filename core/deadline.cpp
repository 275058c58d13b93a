// SPDX-License-Identifier: Apache-2.0
#include "core/deadline.hpp"

#include <algorithm>
#include <thread>

namespace epc {

bool poll_until(const Deadline& deadline, const std::function<bool()>& done) {
  auto pause = std::chrono::microseconds(10);
  constexpr auto kLongestPause = std::chrono::microseconds(1000);
  while (!done()) {
    if (deadline.passed()) return done();
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, kLongestPause);
  }
  return true;
}

}  // namespace epc
