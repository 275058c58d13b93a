// SPDX-License-Identifier: Apache-2.0
// Watches the running ranks until every one has ended: relays their output, reaps them,
// and stops them when the time limit expires, when a peer failed long enough ago, or when
// the launcher is asked to stop.
#ifndef EPC_TESTS_GPU_HARNESS_SUPERVISOR_HPP
#define EPC_TESTS_GPU_HARNESS_SUPERVISOR_HPP

#include <sys/types.h>

#include <vector>

#include "line_relay.hpp"
#include "rank_outcome.hpp"
#include "stop_signals.hpp"

namespace epc::harness {

struct SupervisedRank {
  pid_t pid = -1;      // -1: never started
  int output_fd = -1;  // closed (set to -1) by supervise() at end of stream
  LineRelay relay;
  RankOutcome outcome;
};

struct SupervisionLimits {
  double time_limit_s = 0;  // 0: none
  double fail_grace_s = 0;
  double kill_grace_s = 0;  // between SIGTERM and SIGKILL
};

// Returns when every started rank has been reaped and its output relayed; no process of
// the ranks' groups is left running. `signals` must have been installed before the ranks
// were started, so that no stop request is lost in between.
void supervise(std::vector<SupervisedRank>& ranks, const SupervisionLimits& limits, const StopSignalGuard& signals);

}  // namespace epc::harness

#endif  // EPC_TESTS_GPU_HARNESS_SUPERVISOR_HPP
