// SPDX-License-Identifier: Apache-2.0
// The host's bounded wait (core/deadline.hpp): it returns as soon as what it waits for is
// done, gives up once the deadline has passed and not before, and takes one last look then.
#include <gtest/gtest.h>

#include <chrono>

#include "core/deadline.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

TEST(Deadline, ReturnsAsSoonAsDone) {
  int looks = 0;
  const auto start = Clock::now();
  EXPECT_TRUE(epc::poll_until(epc::Deadline(60000), [&] { return ++looks == 5; }));
  EXPECT_EQ(looks, 5);
  EXPECT_LT(seconds_since(start), 1.0);
}

TEST(Deadline, GivesUpOnlyAfterTheDeadline) {
  int looks = 0;
  const auto start = Clock::now();
  const epc::Deadline deadline(50);
  EXPECT_EQ(deadline.ms(), 50u);
  EXPECT_FALSE(epc::poll_until(deadline, [&] {
    ++looks;
    return false;
  }));
  EXPECT_TRUE(deadline.passed());
  EXPECT_GE(seconds_since(start), 0.05);
  EXPECT_LT(seconds_since(start), 5.0);
  // It looked again and again (pauses of at most 1 ms), not once per deadline.
  EXPECT_GT(looks, 10);
}

TEST(Deadline, ALastLookAfterTheDeadlineCounts) {
  const epc::Deadline deadline(0);
  while (!deadline.passed()) {
  }
  int looks = 0;
  EXPECT_TRUE(epc::poll_until(deadline, [&] { return ++looks == 2; }));
  EXPECT_EQ(looks, 2);
}

TEST(Deadline, AZeroDeadlineStillLooksOnce) {
  int looks = 0;
  EXPECT_TRUE(epc::poll_until(epc::Deadline(0), [&] { return ++looks == 1; }));
  EXPECT_EQ(looks, 1);
}

}  // namespace
