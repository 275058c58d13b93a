// What every GPU test in a rank process shares: its place in the world and the NCCL
// communicator created once for the whole process (through epcomm's bootstrap calls).
#pragma once

#include <string>

#include "epcomm/epcomm.h"
#include "tests/gpu/harness/harness.hpp"

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

// A config most tests start from: a valid low-latency group for the current world.
EpcGroupConfig small_config(EpcMode mode = EPC_MODE_LOW_LATENCY);

}  // namespace epc::gputest
