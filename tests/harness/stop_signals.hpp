// SPDX-License-Identifier: Apache-2.0
// The launcher's handling of the signals that ask it to stop.
//
// Ranks lead their own process groups, so a terminal's Ctrl-C or a test runner's SIGTERM
// reaches only the launcher; it must pass the request on or the ranks would outlive it.
#ifndef EPC_TESTS_GPU_HARNESS_STOP_SIGNALS_HPP
#define EPC_TESTS_GPU_HARNESS_STOP_SIGNALS_HPP

#include <signal.h>

namespace epc::harness {

// While alive: SIGINT, SIGTERM and SIGHUP are counted instead of killing the process, and
// SIGPIPE is ignored (a closed stdout must not kill the launcher before its ranks). The
// previous dispositions come back on destruction.
class StopSignalGuard {
 public:
  StopSignalGuard();
  ~StopSignalGuard();
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

  // How many stop signals have arrived, and the latest one.
  int count() const;
  int last_signal() const;

 private:
  struct sigaction previous_int_;
  struct sigaction previous_term_;
  struct sigaction previous_hup_;
  struct sigaction previous_pipe_;
};

}  // namespace epc::harness

#endif  // EPC_TESTS_GPU_HARNESS_STOP_SIGNALS_HPP
