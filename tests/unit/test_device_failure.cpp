// SPDX-License-Identifier: Apache-2.0
// The messages a failed call gives for what a kernel recorded (core/device_failure.cpp), word
// for word: a refused routing, a ring's impossible slot, a peer that did not arrive, and ranks
// given different step bounds, either way round.
#include <gtest/gtest.h>

#include "core/device_failure.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/device_error.hpp"
#include "kernels/wire/ll_message.hpp"

namespace {

using epc::device_failure_message;
using epc::RecordedFailure;
namespace k = epc::kernels;

// A timed-out dispatch receive of rank 1 waiting for rank 0 for 1.2 s in step 6 (epoch 7) of
// the kind `wanted`, whose last read word carried epoch `seen_epoch`.
RecordedFailure dispatch_timeout(uint32_t wanted, uint32_t seen_epoch) {
  return {EPC_ERR_TIMEOUT, k::kPhaseDispatchReceive, 1, 0, 1200000000, uint64_t{seen_epoch} << 32 | 3, wanted};
}

TEST(DeviceFailure, RoutingNamesTheRankAndTheExpertRange) {
  const RecordedFailure f{EPC_ERR_INVALID_ARGUMENT, k::kPhaseRouting, 2, -1, 0, 0, 0};
  EXPECT_EQ(device_failure_message(f, 64, 1000),
            "routing check: rank 2 was given an expert id outside [-1, 64) or more entries for one expert than it "
            "has rows; the group is unusable, destroy it");
}

TEST(DeviceFailure, AnImpossibleRingSlotIsABug) {
  const RecordedFailure f{EPC_ERR_INTERNAL, k::kPhaseHtRingData, 3, 1, 0, 0, 0};
  EXPECT_EQ(device_failure_message(f, 64, 1000),
            "high-throughput ring data (the writer has not published the next slot): rank 3 found in its ring from "
            "rank 1 a slot that the protocol never puts there (a bug in epcomm: please report it); the group is "
            "unusable, destroy it");
}

TEST(DeviceFailure, APeerThatDidNotArrive) {
  const std::string absent =
      "low-latency dispatch receive: rank 1 waited 1200 ms for rank 0, which did not arrive (timeout 1000 ms); the "
      "group is unusable, destroy it";
  // The peer's word still holds an earlier step's epoch, of either kind, or nothing.
  EXPECT_EQ(device_failure_message(dispatch_timeout(7, 4), 64, 1000), absent);
  EXPECT_EQ(device_failure_message(dispatch_timeout(7, 4 | k::kLlLineEpochBit), 64, 1000), absent);
  EXPECT_EQ(device_failure_message(dispatch_timeout(7 | k::kLlLineEpochBit, 0), 64, 1000), absent);
  // Waits that record no epoch (wanted 0), and other phases, never name a step bound.
  EXPECT_EQ(device_failure_message(dispatch_timeout(0, 7 | k::kLlLineEpochBit), 64, 1000), absent);
  RecordedFailure combine = dispatch_timeout(7, 7 | k::kLlLineEpochBit);
  combine.phase = k::kPhaseCombineReceive;
  EXPECT_EQ(device_failure_message(combine, 64, 500),
            "low-latency combine receive: rank 1 waited 1200 ms for rank 0, which did not arrive (timeout 500 ms); "
            "the group is unusable, destroy it");
}

TEST(DeviceFailure, RanksGivenDifferentStepBoundsAreToldWhichWayEachMovedTheStep) {
  EXPECT_EQ(device_failure_message(dispatch_timeout(7, 7 | k::kLlLineEpochBit), 64, 1000),
            "low-latency dispatch receive: rank 1 waited 1200 ms for rank 0, whose signal says it moved this step as "
            "line records, and rank 1 as records: the ranks were given different EpcDispatchArgs.max_step_tokens "
            "(every rank must pass the same); the group is unusable, destroy it");
  EXPECT_EQ(device_failure_message(dispatch_timeout(7 | k::kLlLineEpochBit, 7), 64, 1000),
            "low-latency dispatch receive: rank 1 waited 1200 ms for rank 0, whose signal says it moved this step as "
            "records, and rank 1 as line records: the ranks were given different EpcDispatchArgs.max_step_tokens "
            "(every rank must pass the same); the group is unusable, destroy it");
}

}  // namespace
