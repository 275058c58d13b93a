// SPDX-License-Identifier: Apache-2.0
#include "bench/output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "bench/report.hpp"

namespace epc::bench {

Output::Output(const Options& options) : json_path_(options.out) {
  if (const char* table = std::getenv(kTableEnv)) table_path_ = table;
  if (const char* fd = std::getenv(kProgressFdEnv)) {
    char* end = nullptr;
    const long v = std::strtol(fd, &end, 10);
    if (*end == '\0' && v > 2 && v < 1 << 20 && fcntl(static_cast<int>(v), F_GETFD) >= 0) {
      progress_fd_ = static_cast<int>(v);
    }
  }
}

void Output::progress(const std::string& line) const {
  const std::string text = "[epcomm-bench] " + line + "\n";
  // One write: lines from several processes must not interleave.
  if (::write(progress_fd_, text.data(), text.size()) < 0) {
    std::fputs(text.c_str(), stderr);
  }
}

bool Output::write(const RunRecord& run, std::string& error) const {
  if (!json_path_.empty() && !write_file_atomically(json_path_, to_json(run), error)) return false;
  if (!table_path_.empty() && !write_file_atomically(table_path_, to_table(run), error)) return false;
  return true;
}

void Output::finish(const RunRecord& run) const {
  if (table_path_.empty()) {
    std::fputs(to_table(run).c_str(), stdout);
    std::fflush(stdout);
  }
}

}  // namespace epc::bench
