// SPDX-License-Identifier: Apache-2.0
#include "supervisor.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "child_process.hpp"

namespace epc::harness {
namespace {

using Clock = std::chrono::steady_clock;

// Short enough that deadlines are met within a blink, long enough to cost no CPU.
constexpr int kPollIntervalMs = 50;
// After the last rank ended, how long to wait for pipes still held open by a process that
// escaped the ranks' process groups (say, one that called setsid()).
constexpr std::chrono::seconds kDrainTimeout{2};
constexpr std::size_t kReadChunkBytes = 64 * 1024;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// strsignal() gives prose ("Interrupt"); the stop signals are better known by name.
std::string signal_name(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "signal " + std::to_string(signal);
  }
}

std::string format_seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

class Supervisor {
 public:
  Supervisor(std::vector<SupervisedRank>& ranks, const SupervisionLimits& limits, const StopSignalGuard& signals)
      : ranks_(ranks), limits_(limits), signals_(signals), state_(ranks.size()) {}

  void run() {
    start_ = Clock::now();
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      state_[i].running = ranks_[i].outcome.started;
      if (!ranks_[i].outcome.started) note_failure(static_cast<int>(i));
    }
    while (true) {
      reap_finished();
      handle_stop_signals();
      check_time_limit();
      check_fail_grace();
      escalate_to_kill();
      if (!any_running()) {
        if (!any_output_open()) return;
        if (!all_ended_at_) all_ended_at_ = Clock::now();
        if (Clock::now() - *all_ended_at_ > kDrainTimeout) {
          for (SupervisedRank& rank : ranks_) close_output(rank);
          return;
        }
      }
      relay_output();
    }
  }

 private:
  struct RankState {
    bool running = false;  // started and not yet reaped
    std::optional<Clock::time_point> term_sent_at;
    bool kill_sent = false;
  };

  bool any_running() const {
    for (const RankState& state : state_) {
      if (state.running) return true;
    }
    return false;
  }

  bool any_output_open() const {
    for (const SupervisedRank& rank : ranks_) {
      if (rank.output_fd >= 0) return true;
    }
    return false;
  }

  // "rank 0, rank 2" for the ranks still running and not yet asked to stop.
  std::string unstopped_ranks() const {
    std::string list;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (!state_[i].running || ranks_[i].outcome.stop_reason != StopReason::none) continue;
      list += (list.empty() ? "rank " : ", rank ") + std::to_string(i);
    }
    return list;
  }

  void relay_output() {
    std::vector<pollfd> fds;
    std::vector<std::size_t> owners;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].output_fd < 0) continue;
      fds.push_back(pollfd{ranks_[i].output_fd, POLLIN, 0});
      owners.push_back(i);
    }
    // With no fd left, poll() is just an interruptible sleep.
    const int ready = poll(fds.data(), fds.size(), kPollIntervalMs);
    if (ready <= 0) return;  // timeout, or EINTR from a stop signal
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents != 0) drain(ranks_[owners[k]]);
    }
  }

  void drain(SupervisedRank& rank) {
    char buffer[kReadChunkBytes];
    while (rank.output_fd >= 0) {
      const ssize_t n = read(rank.output_fd, buffer, sizeof buffer);
      if (n > 0) {
        rank.relay.feed(buffer, static_cast<std::size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      } else {
        close_output(rank);  // end of stream, or an error that reading again will not fix
      }
    }
  }

  void close_output(SupervisedRank& rank) {
    if (rank.output_fd < 0) return;
    rank.relay.finish();
    close(rank.output_fd);
    rank.output_fd = -1;
  }

  void reap_finished() {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (!state_[i].running) continue;
      SupervisedRank& rank = ranks_[i];
      siginfo_t info;
      std::memset(&info, 0, sizeof info);
      // WNOWAIT leaves the zombie in place: while it exists its pid cannot be reused, so
      // the group kill below cannot hit an unrelated process.
      const int rc = waitid(P_PID, static_cast<id_t>(rank.pid), &info, WEXITED | WNOHANG | WNOWAIT);
      if (rc == 0 && info.si_pid == 0) continue;  // still running
      if (rc != 0 && errno == EINTR) continue;    // ask again next round
      // Whatever the rank started and left behind goes with it.
      if (rc == 0) signal_group(rank.pid, SIGKILL);
      int status = 0;
      pid_t reaped = -1;
      do {
        reaped = waitpid(rank.pid, &status, 0);
      } while (reaped < 0 && errno == EINTR);
      if (reaped < 0) {
        // Someone else reaped it (the program set SIGCHLD to SIG_IGN?): the code is lost.
        harness_say("rank " + std::to_string(i) + ": exit status lost (" + std::strerror(errno) + ")");
        status = 255 << 8;
      }
      rank.outcome.finished = true;
      rank.outcome.wait_status = status;
      state_[i].running = false;
      if (rank_failed_by_itself(rank.outcome)) note_failure(static_cast<int>(i));
    }
  }

  void note_failure(int rank) {
    if (first_failure_at_) return;
    first_failure_at_ = Clock::now();
    first_failed_rank_ = rank;
    const std::string running = unstopped_ranks();
    if (running.empty()) return;
    harness_say("rank " + std::to_string(rank) + " " +
                describe_outcome(ranks_[static_cast<std::size_t>(rank)].outcome) + "; " + running +
                " will be stopped unless finished within " + format_seconds(limits_.fail_grace_s) + " s");
  }

  void handle_stop_signals() {
    const int count = signals_.count();
    if (count == stop_signals_seen_) return;
    stop_signals_seen_ = count;
    const int signal = signals_.last_signal();
    if (count == 1) {
      harness_say("received " + signal_name(signal) + "; stopping all ranks");
      stop_unstopped(StopReason::interrupted);
      return;
    }
    harness_say("received " + signal_name(signal) + " again; killing all ranks");
    stop_unstopped(StopReason::interrupted);
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (state_[i].running && !state_[i].kill_sent) {
        signal_group(ranks_[i].pid, SIGKILL);
        state_[i].kill_sent = true;
      }
    }
  }

  void check_time_limit() {
    if (time_limit_handled_ || limits_.time_limit_s <= 0) return;
    if (Clock::now() < start_ + seconds(limits_.time_limit_s)) return;
    time_limit_handled_ = true;
    const std::string running = unstopped_ranks();
    if (running.empty()) return;
    harness_say("time limit of " + format_seconds(limits_.time_limit_s) + " s expired; still running: " + running +
                "; sending SIGTERM");
    stop_unstopped(StopReason::time_limit);
  }

  void check_fail_grace() {
    if (grace_handled_ || !first_failure_at_) return;
    if (Clock::now() < *first_failure_at_ + seconds(limits_.fail_grace_s)) return;
    grace_handled_ = true;
    const std::string running = unstopped_ranks();
    if (running.empty()) return;
    harness_say("rank " + std::to_string(first_failed_rank_) + " failed " + format_seconds(limits_.fail_grace_s) +
                " s ago; still running: " + running + "; sending SIGTERM");
    stop_unstopped(StopReason::peer_failed);
  }

  // SIGTERM to every running rank the launcher has not yet asked to stop.
  void stop_unstopped(StopReason reason) {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      RankOutcome& outcome = ranks_[i].outcome;
      if (!state_[i].running || outcome.stop_reason != StopReason::none) continue;
      outcome.stop_reason = reason;
      if (reason == StopReason::peer_failed) outcome.failed_peer = first_failed_rank_;
      signal_group(ranks_[i].pid, SIGTERM);
      state_[i].term_sent_at = Clock::now();
    }
  }

  void escalate_to_kill() {
    std::string killed;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      RankState& state = state_[i];
      if (!state.running || !state.term_sent_at || state.kill_sent) continue;
      if (Clock::now() < *state.term_sent_at + seconds(limits_.kill_grace_s)) continue;
      signal_group(ranks_[i].pid, SIGKILL);
      state.kill_sent = true;
      killed += (killed.empty() ? "rank " : ", rank ") + std::to_string(i);
    }
    if (!killed.empty()) {
      harness_say(killed + " still running " + format_seconds(limits_.kill_grace_s) +
                  " s after SIGTERM; sending SIGKILL");
    }
  }

  std::vector<SupervisedRank>& ranks_;
  const SupervisionLimits limits_;
  const StopSignalGuard& signals_;
  std::vector<RankState> state_;
  Clock::time_point start_;
  std::optional<Clock::time_point> first_failure_at_;
  int first_failed_rank_ = -1;
  bool time_limit_handled_ = false;
  bool grace_handled_ = false;
  int stop_signals_seen_ = 0;
  std::optional<Clock::time_point> all_ended_at_;
};

}  // namespace

void supervise(std::vector<SupervisedRank>& ranks, const SupervisionLimits& limits, const StopSignalGuard& signals) {
  Supervisor(ranks, limits, signals).run();
}

}  // namespace epc::harness
