// SPDX-License-Identifier: Apache-2.0
// What every GPU test in a rank process shares: its place in the world and the NCCL
// communicator created once for the whole process (through epcomm's bootstrap calls).
#pragma once

#include <cstdint>
#include <string>

#include "epcomm/epcomm.h"
#include "tests/harness/harness.hpp"

namespace epc::gputest {

struct RankContext {
  harness::RankEnv env;
  void* comm = nullptr;  // ncclComm_t
};

const RankContext& context();
void set_context(const RankContext& ctx);

// This process's rank.
inline int my_rank() { return context().env.rank; }

// The calling thread's epcomm error message.
std::string last_error();

// The timeout_ms of the groups the tests create (small_config, group_config): 20000, or the
// value of EPCOMM_TEST_TIMEOUT_MS when it is set to a positive number of milliseconds
// (tools/gpu/run_sanitizers.sh raises it: kernels run 10-100x slower under
// compute-sanitizer). Tests of the timeout itself set their own.
uint32_t test_timeout_ms();

// A config most tests start from: a valid low-latency group for the current world.
EpcGroupConfig small_config(EpcMode mode = EPC_MODE_LOW_LATENCY);

}  // namespace epc::gputest
