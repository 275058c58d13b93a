// SPDX-License-Identifier: Apache-2.0
#include "rank_outcome.hpp"

#include <sys/wait.h>

#include <cstring>

#include "line_relay.hpp"

namespace epc::harness {
namespace {

bool exited_with(const RankOutcome& outcome, int code) {
  return outcome.started && outcome.finished && outcome.stop_reason == StopReason::none &&
         WIFEXITED(outcome.wait_status) && WEXITSTATUS(outcome.wait_status) == code;
}

}  // namespace

bool rank_passed(const RankOutcome& outcome) { return exited_with(outcome, 0); }

bool rank_skipped(const RankOutcome& outcome) { return exited_with(outcome, kSkipExitCode); }

bool rank_failed_by_itself(const RankOutcome& outcome) {
  if (!outcome.started) return true;
  if (!outcome.finished || outcome.stop_reason != StopReason::none) return false;
  return !rank_passed(outcome);
}

std::string describe_outcome(const RankOutcome& outcome) {
  if (!outcome.started) return "FAILED (could not start: " + outcome.start_error + ")";
  switch (outcome.stop_reason) {
    case StopReason::time_limit:
      return "FAILED (timed out)";
    case StopReason::peer_failed:
      return "FAILED (stopped after rank " + std::to_string(outcome.failed_peer) + " failed)";
    case StopReason::interrupted:
      return "FAILED (interrupted)";
    case StopReason::none:
      break;
  }
  if (!outcome.finished) return "FAILED (still running)";  // not reached after supervise()
  const int status = outcome.wait_status;
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return "FAILED (killed by signal " + std::to_string(signal) + ": " + strsignal(signal) + ")";
  }
  const int code = WEXITSTATUS(status);
  if (code == 0) return "PASSED";
  return "FAILED (exit code " + std::to_string(code) + ")";
}

int print_summary(const std::vector<RankOutcome>& outcomes) {
  int passed = 0;
  int skipped = 0;
  for (std::size_t rank = 0; rank < outcomes.size(); ++rank) {
    if (rank_passed(outcomes[rank])) ++passed;
    if (rank_skipped(outcomes[rank])) ++skipped;
  }
  // A skip counts only when every rank agrees; ranks disagreeing is a failure to look at.
  const bool all_skipped = !outcomes.empty() && skipped == static_cast<int>(outcomes.size());
  for (std::size_t rank = 0; rank < outcomes.size(); ++rank) {
    const std::string text = all_skipped ? "SKIPPED" : describe_outcome(outcomes[rank]);
    write_line(1, "rank " + std::to_string(rank) + ": " + text);
  }
  if (all_skipped) {
    write_line(1, "0 passed, 0 failed, " + std::to_string(skipped) + " skipped");
    return kSkipExitCode;
  }
  const int failed = static_cast<int>(outcomes.size()) - passed;
  write_line(1, std::to_string(passed) + " passed, " + std::to_string(failed) + " failed");
  return failed == 0 ? 0 : 1;
}

}  // namespace epc::harness
