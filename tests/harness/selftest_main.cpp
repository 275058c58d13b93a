// SPDX-License-Identifier: Apache-2.0
// Exercises the launcher without CUDA work in the ranks, on a machine with or without GPUs.
// The device count and the unique id are faked, so this program links neither epcomm nor
// unique_id_default.cpp.
//
// `--self-check` runs every scenario below in a child launcher and checks its exit code,
// its output, how long it took and that none of its processes is left; exit 0 means all
// held. Otherwise the program is one launcher run with these flags (passed on to ranks):
//   --fake-gpus=N   the device count the harness sees (default 4; 0 means "no GPU";
//                   "cuda" asks the real CUDA runtime)
//   --mode=pass           every rank prints and returns 0
//   --mode=fail-rank1     rank 1 returns 3, the others 0
//   --mode=hang           every rank sleeps forever
//   --mode=hang-grandchild  every rank starts `sleep 1000`, then sleeps forever
//   --mode=hang-ignore-term every rank ignores SIGTERM and sleeps forever (needs SIGKILL)
//   --mode=crash-rank0    rank 0 raises SIGSEGV, the others sleep forever
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "harness.hpp"
#include "hex.hpp"

extern char** environ;

namespace {

std::string flag_value(int argc, char** argv, const char* name, const std::string& fallback) {
  const std::size_t length = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], name, length) == 0) return argv[i] + length;
  }
  return fallback;
}

[[noreturn]] void sleep_forever() {
  while (true) pause();
}

bool make_fake_unique_id(std::string& hex, std::string& /*error*/) {
  std::random_device entropy;
  EpcUniqueId id;
  for (std::uint8_t& byte : id.bytes) byte = static_cast<std::uint8_t>(entropy());
  hex = epc::harness::hex_encode(id.bytes, EPC_UNIQUE_ID_BYTES);
  return true;
}

int rank_main(const epc::harness::RankEnv& env, int argc, char** argv) {
  const std::string mode = flag_value(argc, argv, "--mode=", "pass");
  std::printf("rank %d of %d on device %d, id %.16s..., mode %s, argc %d\n", env.rank, env.world_size, env.device,
              env.unique_id_hex.c_str(), mode.c_str(), argc);
  for (int i = 1; i < argc; ++i) std::printf("  argv[%d] = %s\n", i, argv[i]);

  if (mode == "pass") {
    std::fprintf(stderr, "a line on stderr from rank %d\n", env.rank);
    // One line written in two pieces: the launcher must print it whole.
    std::printf("first half of a split line, ");
    std::fflush(stdout);
    usleep(100 * 1000);
    std::printf("second half (rank %d)\n", env.rank);
    return 0;
  }
  if (mode == "fail-rank1") return env.rank == 1 ? 3 : 0;
  if (mode == "hang") sleep_forever();
  if (mode == "hang-ignore-term") {
    signal(SIGTERM, SIG_IGN);
    sleep_forever();
  }
  if (mode == "hang-grandchild") {
    char sleep_name[] = "sleep";
    char sleep_arg[] = "1000";
    char* sleep_argv[] = {sleep_name, sleep_arg, nullptr};
    pid_t pid = -1;
    if (posix_spawnp(&pid, "sleep", nullptr, nullptr, sleep_argv, environ) == 0) {
      std::printf("rank %d started grandchild pid %d\n", env.rank, static_cast<int>(pid));
    }
    sleep_forever();
  }
  if (mode == "crash-rank0") {
    if (env.rank == 0) {
      usleep(200 * 1000);
      signal(SIGSEGV, SIG_DFL);  // a sanitizer's handler would turn the crash into exit(1)
      raise(SIGSEGV);
    }
    sleep_forever();
  }
  std::fprintf(stderr, "unknown --mode=%s\n", mode.c_str());
  return 2;
}

}  // namespace

struct Scenario {
  std::vector<std::string> args;
  std::vector<std::string> env;  // added to a copy of ours without EPC_* variables
  int expected_exit;
  std::vector<std::string> expected_text;
  double max_seconds;
};

struct Finished {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
  pid_t pid = -1;
};

// Runs this program with `scenario`'s arguments and environment, collecting its output.
bool run_scenario(const Scenario& scenario, Finished& finished) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (std::strncmp(*entry, "EPC_", 4) != 0) env.emplace_back(*entry);
  }
  env.insert(env.end(), scenario.env.begin(), scenario.env.end());
  std::vector<std::string> args = {"harness-selftest"};
  args.insert(args.end(), scenario.args.begin(), scenario.args.end());
  std::vector<char*> argv;
  std::vector<char*> envp;
  for (std::string& arg : args) argv.push_back(arg.data());
  for (std::string& entry : env) envp.push_back(entry.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  const int rc = posix_spawn(&finished.pid, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return false;
  }
  char buffer[4096];
  ssize_t n = 0;
  while ((n = read(fds[0], buffer, sizeof buffer)) != 0) {
    if (n > 0) finished.output.append(buffer, static_cast<std::size_t>(n));
    if (n < 0 && errno != EINTR) break;
  }
  close(fds[0]);
  int status = 0;
  waitpid(finished.pid, &status, 0);
  finished.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  finished.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

// Processes (ranks and whatever they started) still carrying the launcher's pid mark.
int leftover_processes(pid_t launcher) {
  const std::string mark = "EPC_LAUNCHER_PID=" + std::to_string(launcher);
  int found = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  while (dirent* entry = readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::ifstream file(std::string("/proc/") + entry->d_name + "/environ", std::ios::binary);
    const std::string environment((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    // Entries are NUL-separated; anchor both ends so "EPC_LAUNCHER_PID=12" misses 123.
    if (('\0' + environment).find('\0' + mark + '\0') != std::string::npos) ++found;
  }
  closedir(proc);
  return found;
}

int self_check() {
  const std::string id = "EPC_UNIQUE_ID=" + std::string(EPC_UNIQUE_ID_BYTES * 2, 'a');
  const std::vector<Scenario> scenarios = {
      {{"--mode=pass"}, {}, 0, {"rank 3: PASSED", "4 passed, 0 failed"}, 5},
      {{"--mode=fail-rank1"}, {}, 1, {"rank 1: FAILED (exit code 3)", "3 passed, 1 failed"}, 5},
      {{"--mode=hang", "--time-limit=2"},
       {},
       1,
       {"time limit of 2 s expired; still running: rank 0, rank 1, rank 2, rank 3", "rank 2: FAILED (timed out)",
        "0 passed, 4 failed"},
       7},
      {{"--mode=hang-grandchild", "--ranks=2", "--time-limit=1"},
       {},
       1,
       {"started grandchild", "rank 1: FAILED (timed out)"},
       6},
      {{"--mode=hang-ignore-term", "--ranks=2", "--time-limit=1"},
       {},
       1,
       {"still running 5 s after SIGTERM; sending SIGKILL", "rank 0: FAILED (timed out)"},
       10},
      {{"--mode=crash-rank0", "--fail-grace=1"},
       {},
       1,
       {"rank 0: FAILED (killed by signal 11", "rank 3: FAILED (stopped after rank 0 failed)"},
       6},
      {{"--fake-gpus=0", "--ranks=2"}, {}, 77, {"SKIP: no CUDA GPU visible", "needs 2 GPUs"}, 5},
      {{"--ranks=5"}, {}, 77, {"SKIP: harness-selftest needs 5 GPUs but only 4 GPUs are"}, 5},
      {{"--ranks=6", "--allow-oversubscribe"}, {}, 0, {"rank 5 of 6 on device 1", "6 passed"}, 5},
      {{"--mode=pass", "--ranks=3"},
       {"EPC_TEST_RANKS=2", "EPC_TEST_TIME_LIMIT=9"},
       0,
       {"starting 3 ranks", "time limit 9 s"},
       5},
      {{"--mode=pass", "--ranks=9"},
       {"EPC_RANK=1", "EPC_WORLD_SIZE=2", id},
       0,
       {"rank 1 of 2 on device 1", "argc 2"},
       5},
      {{},
       {"EPC_RANK=0", "EPC_WORLD_SIZE=2", "EPC_UNIQUE_ID=12zz"},
       2,
       {"EPC_UNIQUE_ID must be 256 hex digits, got 4 characters"},
       5},
      {{}, {"EPC_RANK=0", "EPC_WORLD_SIZE=2"}, 2, {"EPC_UNIQUE_ID is missing"}, 5},
      {{"--time-limit=soon"}, {}, 2, {"--time-limit must be a non-negative number"}, 5},
  };
  int failures = 0;
  for (const Scenario& scenario : scenarios) {
    std::string name;
    for (const std::string& arg : scenario.env) name += arg.substr(0, 24) + " ";
    for (const std::string& arg : scenario.args) name += arg + " ";
    Finished finished;
    std::vector<std::string> problems;
    if (!run_scenario(scenario, finished)) problems.push_back("could not start");
    if (finished.exit_code != scenario.expected_exit) {
      problems.push_back("exit code " + std::to_string(finished.exit_code) + ", expected " +
                         std::to_string(scenario.expected_exit));
    }
    for (const std::string& text : scenario.expected_text) {
      if (finished.output.find(text) == std::string::npos) problems.push_back("no '" + text + "'");
    }
    if (finished.seconds > scenario.max_seconds) {
      problems.push_back("took " + std::to_string(finished.seconds) + " s");
    }
    if (const int left = leftover_processes(finished.pid); left > 0) {
      problems.push_back(std::to_string(left) + " processes left running");
    }
    std::printf("%s %s(exit %d, %.1f s)\n", problems.empty() ? "ok  " : "FAIL", name.c_str(), finished.exit_code,
                finished.seconds);
    for (const std::string& problem : problems) std::printf("       %s\n", problem.c_str());
    if (!problems.empty()) {
      std::printf("------ output:\n%s------\n", finished.output.c_str());
      ++failures;
    }
  }
  std::printf("%d of %zu scenarios failed\n", failures, scenarios.size());
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--self-check") == 0) return self_check();
  const std::string fake_gpus = flag_value(argc, argv, "--fake-gpus=", "4");
  epc::harness::Options options;  // not default_options(): that would need epcomm
  if (fake_gpus != "cuda") {
    options.device_count = [fake_gpus](int& count, std::string& error) {
      count = std::atoi(fake_gpus.c_str());
      if (count > 0) return true;
      error = "fake: no device (--fake-gpus=" + fake_gpus + ")";
      return false;
    };
  }
  options.make_unique_id = make_fake_unique_id;
  return epc::harness::run(argc, argv, rank_main, options);
}
