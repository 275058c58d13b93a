// SPDX-License-Identifier: Apache-2.0
// Where rank 0's results go. The launcher (main.cpp) passes two things through the
// environment of the ranks it starts: EPC_BENCH_TABLE, a file for the final table, which the
// launcher prints on its own stdout after every rank has ended (so the table comes last, not
// mixed with the ranks' relayed lines), and EPC_BENCH_PROGRESS_FD, a copy of the launcher's
// stderr for the progress lines. Started by another launcher, rank 0 prints both itself.
#pragma once

#include <string>

#include "bench/options.hpp"
#include "bench/record.hpp"

namespace epc::bench {

constexpr const char kTableEnv[] = "EPC_BENCH_TABLE";
constexpr const char kProgressFdEnv[] = "EPC_BENCH_PROGRESS_FD";

class Output {
 public:
  explicit Output(const Options& options);
  void progress(const std::string& line) const;
  // Rewrites the JSON (with --out) and the table file; called after every point so that a run
  // stopped half-way leaves what it measured.
  bool write(const RunRecord& run, std::string& error) const;
  // At the end: prints the table on stdout when no launcher will.
  void finish(const RunRecord& run) const;

 private:
  std::string json_path_;
  std::string table_path_;
  int progress_fd_ = 2;
};

}  // namespace epc::bench
