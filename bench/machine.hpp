// SPDX-License-Identifier: Apache-2.0
// What the JSON record says about the machine: every rank's GPU, and the NCCL, CUDA and
// driver versions actually loaded (not only those compiled against).
#pragma once

#include <string>

#include "bench/rank_session.hpp"
#include "bench/record.hpp"

namespace epc::bench {

// Collective (gathers every rank's GPU). Fields that cannot be read say "unknown".
bool describe_machine(RankSession& session, MachineInfo& out, std::string& error);

}  // namespace epc::bench
