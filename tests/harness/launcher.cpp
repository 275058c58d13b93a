// SPDX-License-Identifier: Apache-2.0
#include "launcher.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "device_count.hpp"
#include "hex.hpp"
#include "launcher_flags.hpp"
#include "rank_env.hpp"
#include "stop_signals.hpp"
#include "supervisor.hpp"

extern char** environ;

namespace epc::harness {
namespace {

// Variables the launcher sets per rank; inherited copies are dropped so a launcher started
// from inside another rank cannot pass stale values on.
constexpr const char* kRankVars[] = {"EPC_RANK", "EPC_WORLD_SIZE", "EPC_UNIQUE_ID", "EPC_LOCAL_DEVICE",
                                     kLauncherPidVar};

std::string program_name(const char* argv0) {
  if (argv0 == nullptr) return "this test";
  const char* slash = std::strrchr(argv0, '/');
  return slash == nullptr ? argv0 : slash + 1;
}

std::string gpus(int count) { return std::to_string(count) + (count == 1 ? " GPU" : " GPUs"); }

bool is_rank_var(const char* entry) {
  for (const char* name : kRankVars) {
    const std::size_t length = std::strlen(name);
    if (std::strncmp(entry, name, length) == 0 && entry[length] == '=') return true;
  }
  return false;
}

std::vector<std::string> rank_environment(int rank, int world_size, int device, const std::string& unique_id_hex) {
  std::vector<std::string> entries;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (!is_rank_var(*entry)) entries.emplace_back(*entry);
  }
  entries.push_back("EPC_RANK=" + std::to_string(rank));
  entries.push_back("EPC_WORLD_SIZE=" + std::to_string(world_size));
  entries.push_back("EPC_UNIQUE_ID=" + unique_id_hex);
  entries.push_back("EPC_LOCAL_DEVICE=" + std::to_string(device));
  entries.push_back(std::string(kLauncherPidVar) + "=" + std::to_string(getpid()));
  return entries;
}

std::vector<char*> as_argv(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Returns 0 and fills `world_size` and `gpu_count`, or the code run_launcher returns.
int choose_world(const LauncherFlags& flags, const Options& options, const std::string& program, int& world_size,
                 int& gpu_count) {
  std::string error;
  if (!query_device_count(options, gpu_count, error)) {
    const std::string needed = flags.ranks > 0 ? gpus(flags.ranks) : "at least 1 GPU";
    std::fprintf(stderr, "SKIP: no CUDA GPU visible (%s); %s needs %s\n", error.c_str(), program.c_str(),
                 needed.c_str());
    return 77;
  }
  world_size = flags.ranks > 0 ? flags.ranks : gpu_count;
  if (world_size > gpu_count && !flags.allow_oversubscribe) {
    std::fprintf(stderr,
                 "SKIP: %s needs %s but only %s visible (--allow-oversubscribe lets ranks "
                 "share GPUs)\n",
                 program.c_str(), gpus(world_size).c_str(),
                 (gpus(gpu_count) + (gpu_count == 1 ? " is" : " are")).c_str());
    return 77;
  }
  return 0;
}

// Returns 0 and fills `hex`, or the code run_launcher returns.
int create_unique_id(const Options& options, std::string& hex) {
  if (!options.make_unique_id) {
    std::fprintf(stderr, "harness: Options::make_unique_id is empty; start from default_options()\n");
    return 1;
  }
  std::string error;
  if (!options.make_unique_id(hex, error)) {
    std::fprintf(stderr, "harness: could not create the NCCL unique id: %s\n", error.c_str());
    return 1;
  }
  EpcUniqueId check;
  if (!hex_decode(hex, check.bytes, EPC_UNIQUE_ID_BYTES)) {
    std::fprintf(stderr,
                 "harness: the unique-id creator returned %zu characters, not %d hex "
                 "digits\n",
                 hex.size(), EPC_UNIQUE_ID_BYTES * 2);
    return 1;
  }
  return 0;
}

}  // namespace

int run_launcher(int argc, char** argv, const Options& options) {
  const std::string program = program_name(argc > 0 ? argv[0] : nullptr);
  LauncherFlags flags;
  std::string error;
  if (!parse_launcher_flags(argc, argv, options, flags, error)) {
    std::fprintf(stderr, "harness: %s\n", error.c_str());
    return 2;
  }
  int world_size = 0;
  int gpu_count = 0;
  if (int code = choose_world(flags, options, program, world_size, gpu_count); code != 0) {
    return code;
  }
  // The id (and with it NCCL's bootstrap root, when epcomm makes it) lives in this process,
  // which therefore stays up until every rank has ended.
  std::string unique_id_hex;
  if (int code = create_unique_id(options, unique_id_hex); code != 0) return code;

  std::vector<char*> child_argv = strip_launcher_flags(argc, argv);
  if (argc == 0) child_argv.insert(child_argv.begin(), const_cast<char*>(program.c_str()));

  char limit_text[64];
  if (flags.time_limit_s > 0) {
    std::snprintf(limit_text, sizeof limit_text, "time limit %g s", flags.time_limit_s);
  } else {
    std::snprintf(limit_text, sizeof limit_text, "no time limit");
  }
  std::fflush(stdout);  // our lines bypass stdio; whatever the program printed goes first
  harness_say("starting " + std::to_string(world_size) + (world_size == 1 ? " rank" : " ranks") + " of " + program +
              " on " + gpus(gpu_count) + " (" + limit_text + ")");

  const StopSignalGuard signals;  // before spawning, so no stop request goes unhandled
  std::vector<SupervisedRank> ranks;
  ranks.reserve(static_cast<std::size_t>(world_size));
  for (int rank = 0; rank < world_size; ++rank) {
    ranks.push_back(
        SupervisedRank{-1, -1, LineRelay("[rank " + std::to_string(rank) + "] ", STDOUT_FILENO), RankOutcome{}});
    std::vector<std::string> env = rank_environment(rank, world_size, rank % gpu_count, unique_id_hex);
    std::vector<char*> envp = as_argv(env);
    SpawnedChild child;
    SupervisedRank& supervised = ranks.back();
    if (spawn_child(child_argv.data(), envp.data(), child, supervised.outcome.start_error)) {
      supervised.pid = child.pid;
      supervised.output_fd = child.output_fd;
      supervised.outcome.started = true;
    }
  }

  supervise(ranks, SupervisionLimits{flags.time_limit_s, flags.fail_grace_s, options.kill_grace_s}, signals);

  std::vector<RankOutcome> outcomes;
  for (const SupervisedRank& rank : ranks) outcomes.push_back(rank.outcome);
  return print_summary(outcomes);
}

}  // namespace epc::harness
