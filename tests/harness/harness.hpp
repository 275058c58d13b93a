// SPDX-License-Identifier: Apache-2.0
// Multi-process harness for epcomm's GPU tests and benchmark.
//
// A test's main() calls epc::harness::run(). Started plainly, the process becomes the
// launcher: it creates the NCCL unique id, starts one child process per rank, relays their
// output, enforces a time limit and prints a summary. A process whose environment names a
// rank (EPC_RANK, EPC_WORLD_SIZE, EPC_UNIQUE_ID) runs `rank_main` instead, so any launcher
// (ours, a torchrun-like script, a shell loop) can start ranks.
//
// Launcher flags (removed from the argv that ranks see):
//   --ranks=N               world size (else env EPC_TEST_RANKS, else visible GPU count)
//   --time-limit=SECONDS    wall-clock limit for the whole run (else env EPC_TEST_TIME_LIMIT,
//                           else Options::time_limit_s); 0 means no limit
//   --fail-grace=SECONDS    how long surviving ranks may run on after one rank failed
//   --allow-oversubscribe   let ranks share GPUs instead of skipping when GPUs are too few
//
// Exit codes of run(): 0 all ranks passed, 1 a rank failed or the launcher could not start
// the world, 2 malformed flags or environment, 77 skipped (no or too few GPUs; Meson's code).
#ifndef EPC_TESTS_GPU_HARNESS_HARNESS_HPP
#define EPC_TESTS_GPU_HARNESS_HARNESS_HPP

#include <functional>
#include <string>

#include "epcomm/epcomm.h"

namespace epc::harness {

// What one rank process knows about its place in the world.
struct RankEnv {
  int rank = 0;
  int world_size = 0;
  int device = 0;             // CUDA device ordinal this rank should use
  std::string unique_id_hex;  // EPC_UNIQUE_ID_BYTES * 2 lowercase hex digits
  EpcUniqueId unique_id{};    // the same id, decoded
};

// A rank's body. argv has the launcher flags removed. Its return value is the process's
// exit code, so 0 means the rank passed.
using RankMain = std::function<int(const RankEnv& env, int argc, char** argv)>;

// Fills `count` and returns true, or fills `error` and returns false.
using DeviceCountFn = std::function<bool(int& count, std::string& error)>;

// Fills `hex` with a fresh unique id (EPC_UNIQUE_ID_BYTES * 2 hex digits) and returns
// true, or fills `error` and returns false.
using UniqueIdFn = std::function<bool(std::string& hex, std::string& error)>;

struct Options {
  // Empty: ask the CUDA runtime (cudaGetDeviceCount).
  DeviceCountFn device_count;
  // Empty: launcher mode fails with a message. default_options() sets the epcomm creator;
  // it is not the member's default so that programs which inject their own creator (the
  // harness self-test) need not link epcomm.
  UniqueIdFn make_unique_id;
  // Used when neither --time-limit= nor EPC_TEST_TIME_LIMIT is given. 0 means no limit.
  double time_limit_s = 300.0;
  // Used when --fail-grace= is not given.
  double fail_grace_s = 30.0;
  // Between SIGTERM and SIGKILL when the launcher stops ranks.
  double kill_grace_s = 5.0;
};

// Creates the id with epc_unique_id_create() (defined in unique_id_default.cpp, which links
// against epcomm).
bool make_unique_id_with_epcomm(std::string& hex, std::string& error);

// Options with the epcomm unique-id creator. Inline so that only programs that call it
// (directly or through run()'s default argument) need epcomm at link time.
inline Options default_options() {
  Options options;
  options.make_unique_id = make_unique_id_with_epcomm;
  return options;
}

// Entry point for a test's main(): `return epc::harness::run(argc, argv, rank_main);`
int run(int argc, char** argv, const RankMain& rank_main, const Options& options = default_options());

}  // namespace epc::harness

#endif  // EPC_TESTS_GPU_HARNESS_HARNESS_HPP
