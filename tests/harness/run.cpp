// SPDX-License-Identifier: Apache-2.0
// run(): picks rank mode or launcher mode from the environment.
#include <cstdio>
#include <string>

#include "harness.hpp"
#include "launcher.hpp"
#include "rank_env.hpp"

namespace epc::harness {

int run(int argc, char** argv, const RankMain& rank_main, const Options& options) {
  std::string missing;
  switch (detect_rank_env(missing)) {
    case RankEnvPresence::complete:
      return run_rank(argc, argv, rank_main, options);
    case RankEnvPresence::absent:
      return run_launcher(argc, argv, options);
    case RankEnvPresence::partial:
      break;
  }
  std::fprintf(stderr,
               "harness: malformed rank environment: EPC_RANK, EPC_WORLD_SIZE and "
               "EPC_UNIQUE_ID must be set together, but %s %s missing\n",
               missing.c_str(), missing.find(',') == std::string::npos ? "is" : "are");
  return 2;
}

}  // namespace epc::harness
