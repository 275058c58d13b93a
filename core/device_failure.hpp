// SPDX-License-Identifier: Apache-2.0
// What a failed call says about a failure a kernel recorded in the group's error record
// (kernels/wire/device_error.hpp): the phase, the waiting rank and the peer it waited for, or
// the routing it refused. Pure, so the unit tests check every message without a GPU.
#pragma once

#include <cstdint>
#include <string>

namespace epc {

// The record's fields, read by Group::device_failure once its status announced them.
struct RecordedFailure {
  uint32_t status;  // an EpcStatus
  uint32_t phase;   // a kernels::Phase
  int32_t rank, peer;
  uint64_t waited_ns;
  uint64_t seen;  // a step signal's wait: the last word read and the epoch it waited for
  uint32_t wanted;
};

// The message of `f` on a group of `num_experts` experts and a timeout of `timeout_ms`.
std::string device_failure_message(const RecordedFailure& f, uint32_t num_experts, uint32_t timeout_ms);

}  // namespace epc
