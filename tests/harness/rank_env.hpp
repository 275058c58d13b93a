// SPDX-License-Identifier: Apache-2.0
// Rank mode: the process was started as one rank of a world and its environment says which.
#ifndef EPC_TESTS_GPU_HARNESS_RANK_ENV_HPP
#define EPC_TESTS_GPU_HARNESS_RANK_ENV_HPP

#include <string>

#include "harness.hpp"

namespace epc::harness {

// Set by our launcher only; a rank that sees it stops when that process dies.
constexpr const char kLauncherPidVar[] = "EPC_LAUNCHER_PID";

enum class RankEnvPresence {
  absent,    // none of EPC_RANK, EPC_WORLD_SIZE, EPC_UNIQUE_ID: launcher mode
  complete,  // all three: rank mode
  partial,   // some: almost certainly a broken launch script, so refuse to guess
};

// `missing` names the absent variables when the result is `partial`.
RankEnvPresence detect_rank_env(std::string& missing);

// Parses and validates the rank environment, then calls rank_main. Returns rank_main's
// code, 2 for a malformed environment, 77 when no device is given and none is visible.
int run_rank(int argc, char** argv, const RankMain& rank_main, const Options& options);

}  // namespace epc::harness

#endif  // EPC_TESTS_GPU_HARNESS_RANK_ENV_HPP
