// SPDX-License-Identifier: Apache-2.0
#include "rank_env.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "device_count.hpp"
#include "hex.hpp"
#include "launcher_flags.hpp"
#include "number_parse.hpp"

namespace epc::harness {
namespace {

constexpr const char* kRequiredVars[] = {"EPC_RANK", "EPC_WORLD_SIZE", "EPC_UNIQUE_ID"};

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

int malformed(const std::string& message) {
  std::fprintf(stderr, "harness: malformed rank environment: %s\n", message.c_str());
  return 2;
}

// Returns 0 when `env` is filled, else the exit code to return.
int parse_rank_env(const Options& options, RankEnv& env) {
  const std::string world_text = env_or_empty("EPC_WORLD_SIZE");
  if (!parse_int_in_range(world_text, 1, kMaxWorldSize, env.world_size)) {
    return malformed("EPC_WORLD_SIZE must be an integer in [1, " + std::to_string(kMaxWorldSize) + "], got '" +
                     world_text + "'");
  }
  const std::string rank_text = env_or_empty("EPC_RANK");
  if (!parse_int_in_range(rank_text, 0, env.world_size - 1, env.rank)) {
    return malformed("EPC_RANK must be an integer in [0, " + std::to_string(env.world_size - 1) + "], got '" +
                     rank_text + "'");
  }
  env.unique_id_hex = env_or_empty("EPC_UNIQUE_ID");
  if (!hex_decode(env.unique_id_hex, env.unique_id.bytes, EPC_UNIQUE_ID_BYTES)) {
    const std::string expected = "EPC_UNIQUE_ID must be " + std::to_string(EPC_UNIQUE_ID_BYTES * 2) + " hex digits";
    if (env.unique_id_hex.size() != EPC_UNIQUE_ID_BYTES * 2) {
      return malformed(expected + ", got " + std::to_string(env.unique_id_hex.size()) + " characters");
    }
    return malformed(expected + ", got non-hex characters");
  }
  // Normalise so unique_id_hex always reads the same whatever case the launcher used.
  env.unique_id_hex = hex_encode(env.unique_id.bytes, EPC_UNIQUE_ID_BYTES);

  const char* device_text = std::getenv("EPC_LOCAL_DEVICE");
  if (device_text != nullptr) {
    if (!parse_int_in_range(device_text, 0, 1 << 20, env.device)) {
      return malformed(std::string("EPC_LOCAL_DEVICE must be a non-negative integer, got '") + device_text + "'");
    }
    return 0;
  }
  int count = 0;
  std::string error;
  if (!query_device_count(options, count, error)) {
    std::fprintf(stderr, "SKIP: no CUDA GPU visible (%s); rank %d of %d needs a GPU\n", error.c_str(), env.rank,
                 env.world_size);
    return 77;
  }
  env.device = env.rank % count;
  return 0;
}

// Our launcher keeps the NCCL bootstrap root alive; once it is gone this rank can only hang,
// and a launcher killed by SIGKILL (say, by a CI timeout) could not stop us itself.
int stop_with_launcher() {
  const std::string text = env_or_empty(kLauncherPidVar);
  int launcher_pid = 0;
  if (!parse_int_in_range(text, 1, 1L << 30, launcher_pid)) return 0;
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return 0;  // best effort
  // The launcher may have died before prctl took effect.
  if (getppid() != static_cast<pid_t>(launcher_pid)) {
    std::fprintf(stderr, "harness: launcher (pid %d) has already exited; stopping\n", launcher_pid);
    return 1;
  }
  return 0;
}

}  // namespace

RankEnvPresence detect_rank_env(std::string& missing) {
  int present = 0;
  missing.clear();
  for (const char* name : kRequiredVars) {
    if (std::getenv(name) != nullptr) {
      ++present;
    } else {
      missing += missing.empty() ? name : std::string(", ") + name;
    }
  }
  if (present == 0) return RankEnvPresence::absent;
  if (present == 3) return RankEnvPresence::complete;
  return RankEnvPresence::partial;
}

int run_rank(int argc, char** argv, const RankMain& rank_main, const Options& options) {
  // Output usually goes to a pipe, where stdio would buffer whole blocks; line buffering
  // lets a launcher show what a rank printed before it hung. (setvbuf must come before any
  // output on the stream.)
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  RankEnv env;
  if (const int code = parse_rank_env(options, env); code != 0) return code;
  if (const int code = stop_with_launcher(); code != 0) return code;

  std::vector<char*> rank_argv = strip_launcher_flags(argc, argv);
  const int rank_argc = static_cast<int>(rank_argv.size()) - 1;
  try {
    return rank_main(env, rank_argc, rank_argv.data());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "harness: rank %d: uncaught exception: %s\n", env.rank, e.what());
  } catch (...) {
    std::fprintf(stderr, "harness: rank %d: uncaught non-standard exception\n", env.rank);
  }
  return 1;
}

}  // namespace epc::harness
