// SPDX-License-Identifier: Apache-2.0
// The flags (and their environment fallbacks) that only the launcher reads. Ranks never see
// them: they are stripped from the argv passed to children and to rank_main.
#ifndef EPC_TESTS_GPU_HARNESS_LAUNCHER_FLAGS_HPP
#define EPC_TESTS_GPU_HARNESS_LAUNCHER_FLAGS_HPP

#include <string>
#include <vector>

#include "harness.hpp"

namespace epc::harness {

// The largest world the launcher will start; a guard against a typo forking thousands.
constexpr int kMaxWorldSize = 1024;

struct LauncherFlags {
  int ranks = 0;  // 0: not given, use the visible GPU count
  double time_limit_s = 0;
  double fail_grace_s = 0;
  bool allow_oversubscribe = false;
};

// Reads --ranks=, --time-limit=, --fail-grace=, --allow-oversubscribe, then
// EPC_TEST_RANKS and EPC_TEST_TIME_LIMIT for what the flags left unset, then `defaults`.
// Returns false with `error` set when a value is malformed.
bool parse_launcher_flags(int argc, char** argv, const Options& defaults, LauncherFlags& out, std::string& error);

// argv minus the launcher flags, as pointers into the original strings, ending in nullptr
// (so data() is a valid argv and size() - 1 is argc).
std::vector<char*> strip_launcher_flags(int argc, char** argv);

}  // namespace epc::harness

#endif  // EPC_TESTS_GPU_HARNESS_LAUNCHER_FLAGS_HPP
