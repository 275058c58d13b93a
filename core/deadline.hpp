// SPDX-License-Identifier: Apache-2.0
// A host-side wait with an end: a deadline, and a loop that looks at something until it is
// done or the deadline has passed. Every wait of the host on the peers (NCCL's calls that
// need every rank, core/nccl_wait.hpp) goes through it, so none can last for good.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace epc {

class Deadline {
 public:
  // `ms` milliseconds from now.
  explicit Deadline(uint32_t ms) : ms_(ms), at_(std::chrono::steady_clock::now() + std::chrono::milliseconds(ms)) {}
  bool passed() const { return std::chrono::steady_clock::now() > at_; }
  uint32_t ms() const { return ms_; }

 private:
  uint32_t ms_;
  std::chrono::steady_clock::time_point at_;
};

// Calls `done` until it returns true (then returns true) or the deadline has passed (then
// returns false). Looks once more after the deadline, so a wait that ends just then counts.
// Sleeps between looks, each pause twice the last up to a cap (deadline.cpp): a short wait
// costs little latency, a long one little CPU.
bool poll_until(const Deadline& deadline, const std::function<bool()>& done);

}  // namespace epc
