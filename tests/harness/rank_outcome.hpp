// SPDX-License-Identifier: Apache-2.0
// How one rank ended, and the launcher's end-of-run summary built from those endings.
#ifndef EPC_TESTS_GPU_HARNESS_RANK_OUTCOME_HPP
#define EPC_TESTS_GPU_HARNESS_RANK_OUTCOME_HPP

#include <string>
#include <vector>

namespace epc::harness {

// Why the launcher itself stopped a rank. Takes precedence over the wait status: a rank
// stopped at the time limit timed out, however it then exited.
enum class StopReason {
  none,
  time_limit,   // the run's time limit expired
  peer_failed,  // another rank failed and the grace period expired
  interrupted,  // the launcher got SIGINT/SIGTERM/SIGHUP
};

struct RankOutcome {
  bool started = false;
  std::string start_error;  // why it could not be started, if !started
  bool finished = false;    // reaped; wait_status is valid
  int wait_status = 0;
  StopReason stop_reason = StopReason::none;
  int failed_peer = -1;  // for peer_failed: the rank whose failure triggered the stop
};

// Exit code of a rank that has nothing to test here (e.g. a missing GPU feature).
constexpr int kSkipExitCode = 77;

bool rank_passed(const RankOutcome& outcome);
bool rank_skipped(const RankOutcome& outcome);
// Finished on its own with a non-zero code or a signal, or never started.
bool rank_failed_by_itself(const RankOutcome& outcome);

// "PASSED", "FAILED (exit code 3)", "FAILED (killed by signal 11: Segmentation
// fault)", "FAILED (timed out)", ...
std::string describe_outcome(const RankOutcome& outcome);

// Prints "rank i: ..." per rank and "N passed, M failed". Returns the launcher's exit code:
// 0 when all passed, 77 when all skipped, else 1.
int print_summary(const std::vector<RankOutcome>& outcomes);

}  // namespace epc::harness

#endif  // EPC_TESTS_GPU_HARNESS_RANK_OUTCOME_HPP
