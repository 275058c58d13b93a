// SPDX-License-Identifier: Apache-2.0
#include "launcher_flags.hpp"

#include <cstdlib>
#include <cstring>

#include "number_parse.hpp"

namespace epc::harness {
namespace {

constexpr const char kRanksFlag[] = "--ranks=";
constexpr const char kTimeLimitFlag[] = "--time-limit=";
constexpr const char kFailGraceFlag[] = "--fail-grace=";
constexpr const char kOversubscribeFlag[] = "--allow-oversubscribe";

bool starts_with(const char* text, const char* prefix) { return std::strncmp(text, prefix, std::strlen(prefix)) == 0; }

bool is_launcher_flag(const char* arg) {
  return starts_with(arg, kRanksFlag) || starts_with(arg, kTimeLimitFlag) || starts_with(arg, kFailGraceFlag) ||
         std::strcmp(arg, kOversubscribeFlag) == 0;
}

bool parse_ranks(const std::string& text, const char* source, int& out, std::string& error) {
  if (parse_int_in_range(text, 1, kMaxWorldSize, out)) return true;
  error = std::string(source) + " must be an integer in [1, " + std::to_string(kMaxWorldSize) + "], got '" + text + "'";
  return false;
}

bool parse_duration(const std::string& text, const char* source, double& out, std::string& error) {
  if (parse_seconds(text, out)) return true;
  error = std::string(source) + " must be a non-negative number of seconds, got '" + text + "'";
  return false;
}

}  // namespace

bool parse_launcher_flags(int argc, char** argv, const Options& defaults, LauncherFlags& out, std::string& error) {
  LauncherFlags flags;
  flags.time_limit_s = defaults.time_limit_s;
  flags.fail_grace_s = defaults.fail_grace_s;
  bool ranks_given = false;
  bool time_limit_given = false;

  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (starts_with(arg, kRanksFlag)) {
      if (!parse_ranks(arg + std::strlen(kRanksFlag), "--ranks", flags.ranks, error)) {
        return false;
      }
      ranks_given = true;
    } else if (starts_with(arg, kTimeLimitFlag)) {
      if (!parse_duration(arg + std::strlen(kTimeLimitFlag), "--time-limit", flags.time_limit_s, error)) {
        return false;
      }
      time_limit_given = true;
    } else if (starts_with(arg, kFailGraceFlag)) {
      if (!parse_duration(arg + std::strlen(kFailGraceFlag), "--fail-grace", flags.fail_grace_s, error)) {
        return false;
      }
    } else if (std::strcmp(arg, kOversubscribeFlag) == 0) {
      flags.allow_oversubscribe = true;
    }
  }

  const char* env_ranks = std::getenv("EPC_TEST_RANKS");
  if (!ranks_given && env_ranks != nullptr && *env_ranks != '\0') {
    if (!parse_ranks(env_ranks, "EPC_TEST_RANKS", flags.ranks, error)) return false;
  }
  const char* env_limit = std::getenv("EPC_TEST_TIME_LIMIT");
  if (!time_limit_given && env_limit != nullptr && *env_limit != '\0') {
    if (!parse_duration(env_limit, "EPC_TEST_TIME_LIMIT", flags.time_limit_s, error)) {
      return false;
    }
  }
  out = flags;
  return true;
}

std::vector<char*> strip_launcher_flags(int argc, char** argv) {
  std::vector<char*> kept;
  for (int i = 0; i < argc; ++i) {
    // argv[0] is the program name, never a flag.
    if (i == 0 || !is_launcher_flag(argv[i])) kept.push_back(argv[i]);
  }
  kept.push_back(nullptr);
  return kept;
}

}  // namespace epc::harness
