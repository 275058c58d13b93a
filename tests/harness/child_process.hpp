// SPDX-License-Identifier: Apache-2.0
// Starting a rank process and signalling it together with everything it started.
#ifndef EPC_TESTS_GPU_HARNESS_CHILD_PROCESS_HPP
#define EPC_TESTS_GPU_HARNESS_CHILD_PROCESS_HPP

#include <sys/types.h>

#include <string>

namespace epc::harness {

struct SpawnedChild {
  pid_t pid = -1;
  int output_fd = -1;  // read end (non-blocking) of the pipe holding its stdout and stderr
};

// Runs /proc/self/exe with `argv` and `envp` through posix_spawn: the launcher may already
// have initialised CUDA and started NCCL's bootstrap thread, which a bare fork() would copy
// into a broken state. The child leads a new process group (so signal_group() reaches its
// own children too), reads stdin from /dev/null, and writes stdout and stderr into one pipe,
// which keeps the order in which the child wrote to the two.
bool spawn_child(char* const argv[], char* const envp[], SpawnedChild& out, std::string& error);

// Sends `signal` to the process group led by `leader`. Harmless if the group is gone.
void signal_group(pid_t leader, int signal);

}  // namespace epc::harness

#endif  // EPC_TESTS_GPU_HARNESS_CHILD_PROCESS_HPP
