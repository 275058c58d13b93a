// SPDX-License-Identifier: Apache-2.0
#include "stop_signals.hpp"

#include <cstring>

namespace epc::harness {
namespace {

volatile sig_atomic_t g_stop_count = 0;
volatile sig_atomic_t g_last_stop_signal = 0;

extern "C" void record_stop_signal(int signal) {
  g_stop_count = g_stop_count + 1;
  g_last_stop_signal = signal;
}

void install(int signal, void (*handler)(int), struct sigaction* previous) {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // the supervisor's poll() then returns early with EINTR
  sigaction(signal, &action, previous);
}

}  // namespace

StopSignalGuard::StopSignalGuard() {
  g_stop_count = 0;
  g_last_stop_signal = 0;
  install(SIGINT, record_stop_signal, &previous_int_);
  install(SIGTERM, record_stop_signal, &previous_term_);
  install(SIGHUP, record_stop_signal, &previous_hup_);
  install(SIGPIPE, SIG_IGN, &previous_pipe_);
}

StopSignalGuard::~StopSignalGuard() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGHUP, &previous_hup_, nullptr);
  sigaction(SIGPIPE, &previous_pipe_, nullptr);
}

int StopSignalGuard::count() const { return g_stop_count; }

int StopSignalGuard::last_signal() const { return g_last_stop_signal; }

}  // namespace epc::harness
