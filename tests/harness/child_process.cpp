// SPDX-License-Identifier: Apache-2.0
#include "child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace epc::harness {
namespace {

// Frees the spawn attribute objects however spawn_child leaves.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  bool actions_ready = false;
  bool attributes_ready = false;

  ~SpawnSetup() {
    if (actions_ready) posix_spawn_file_actions_destroy(&actions);
    if (attributes_ready) posix_spawnattr_destroy(&attributes);
  }
};

int prepare(SpawnSetup& setup, int pipe_write_fd) {
  if (int rc = posix_spawn_file_actions_init(&setup.actions); rc != 0) return rc;
  setup.actions_ready = true;
  if (int rc = posix_spawn_file_actions_addopen(&setup.actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0); rc != 0) {
    return rc;
  }
  // dup2 clears close-on-exec on the target, so only these two copies reach the child.
  if (int rc = posix_spawn_file_actions_adddup2(&setup.actions, pipe_write_fd, STDOUT_FILENO); rc != 0) {
    return rc;
  }
  if (int rc = posix_spawn_file_actions_adddup2(&setup.actions, pipe_write_fd, STDERR_FILENO); rc != 0) {
    return rc;
  }

  if (int rc = posix_spawnattr_init(&setup.attributes); rc != 0) return rc;
  setup.attributes_ready = true;
  // The launcher ignores SIGPIPE and catches SIGINT/SIGTERM/SIGHUP; ignored signals would
  // survive exec, so the rank gets defaults and an empty mask explicitly.
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int signal : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&defaults, signal);
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  if (int rc = posix_spawnattr_setsigdefault(&setup.attributes, &defaults); rc != 0) return rc;
  if (int rc = posix_spawnattr_setsigmask(&setup.attributes, &empty_mask); rc != 0) return rc;
  if (int rc = posix_spawnattr_setpgroup(&setup.attributes, 0); rc != 0) return rc;
  const short flags = POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
  return posix_spawnattr_setflags(&setup.attributes, flags);
}

}  // namespace

bool spawn_child(char* const argv[], char* const envp[], SpawnedChild& out, std::string& error) {
  // Close-on-exec on both ends, or every later child would hold earlier children's pipes
  // open and the launcher would never see end-of-file on them.
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    error = std::string("pipe2: ") + std::strerror(errno);
    return false;
  }
  const int read_fd = pipe_fds[0];
  const int write_fd = pipe_fds[1];

  pid_t pid = -1;
  int rc = 0;
  {
    SpawnSetup setup;
    rc = prepare(setup, write_fd);
    if (rc == 0) rc = posix_spawn(&pid, "/proc/self/exe", &setup.actions, &setup.attributes, argv, envp);
  }
  close(write_fd);
  if (rc != 0) {
    close(read_fd);
    error = std::string("posix_spawn /proc/self/exe: ") + std::strerror(rc);
    return false;
  }
  const int status_flags = fcntl(read_fd, F_GETFL);
  if (status_flags >= 0) fcntl(read_fd, F_SETFL, status_flags | O_NONBLOCK);
  out.pid = pid;
  out.output_fd = read_fd;
  return true;
}

void signal_group(pid_t leader, int signal) {
  if (leader > 0) kill(-leader, signal);
}

}  // namespace epc::harness
