// SPDX-License-Identifier: Apache-2.0
// epcomm-bench: the benchmark. Started plainly it is the launcher: it checks the flags and
// that the requested mode, dtype and GPUs exist, then starts one rank process per GPU through
// the shared harness, and prints the table last. Started with EPC_RANK/EPC_WORLD_SIZE/
// EPC_UNIQUE_ID in its environment it is one rank (bench_rank.cpp).
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "bench/bench_rank.hpp"
#include "bench/mode.hpp"
#include "bench/options.hpp"
#include "bench/output.hpp"
#include "tests/harness/launcher_flags.hpp"

namespace {

bool is_rank_process() {
  return std::getenv("EPC_RANK") != nullptr || std::getenv("EPC_WORLD_SIZE") != nullptr ||
         std::getenv("EPC_UNIQUE_ID") != nullptr;
}

// Returns 0 or the exit code.
int check_gpus() {
  int count = 0;
  const cudaError_t c = cudaGetDeviceCount(&count);
  if (c != cudaSuccess || count == 0) {
    std::fprintf(stderr,
                 "epcomm-bench: no CUDA GPU is visible (%s): the benchmark runs one process per GPU "
                 "and needs at least one; nothing was measured\n",
                 c != cudaSuccess ? (std::string(cudaGetErrorName(c)) + ": " + cudaGetErrorString(c)).c_str()
                                  : "cudaGetDeviceCount found 0 devices");
    return 1;
  }
  return 0;
}

// Fails early, before any GPU work, when --out cannot be written.
int check_out_path(const std::string& path) {
  if (path.empty()) return 0;
  const std::string probe = path + ".tmp";
  std::ofstream f(probe);
  if (!f) {
    std::fprintf(stderr, "epcomm-bench: cannot write --out=%s (is its directory there?)\n", path.c_str());
    return 1;
  }
  f.close();
  std::remove(probe.c_str());
  return 0;
}

// The rank count the launcher will start when --ranks= (or EPC_TEST_RANKS) names it, else 0
// (every visible GPU; a malformed value is the harness's to report).
int requested_ranks(int argc, char** argv) {
  epc::harness::LauncherFlags flags;
  std::string ignored;
  if (!epc::harness::parse_launcher_flags(argc, argv, epc::harness::default_options(), flags, ignored)) return 0;
  return flags.ranks;
}

// Returns 0, or 2 when --virtual-node-size does not divide the rank count.
int check_node_size(const epc::bench::Options& options, int nranks) {
  std::string error;
  if (epc::bench::check_virtual_node_size(options, nranks, error)) return 0;
  std::fprintf(stderr, "epcomm-bench: %s\n", error.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  epc::bench::Options options;
  std::string error;
  if (!epc::bench::parse_options(argc, argv, options, error)) {
    std::fprintf(stderr, "epcomm-bench: %s\n", error.c_str());
    return 2;
  }
  if (options.help) {
    std::fputs(epc::bench::usage().c_str(), stdout);
    return 0;
  }
  if (is_rank_process()) return epc::harness::run(argc, argv, epc::bench::rank_main);

  std::string why;
  if (!epc::bench::make_mode(options, why)) {
    std::fprintf(stderr, "epcomm-bench: %s\n", why.c_str());
    return 1;
  }
  // --virtual-node-size against the world the launcher will start: the named rank count
  // before anything else, else every visible GPU once we know there are some.
  const int named_ranks = requested_ranks(argc, argv);
  if (named_ranks > 0) {
    if (int code = check_node_size(options, named_ranks); code != 0) return code;
  }
  if (int code = check_gpus(); code != 0) return code;
  if (named_ranks == 0) {
    int visible = 0;
    if (cudaGetDeviceCount(&visible) == cudaSuccess) {
      if (int code = check_node_size(options, visible); code != 0) return code;
    }
  }
  if (int code = check_out_path(options.out); code != 0) return code;

  // The table file rank 0 writes and we print after every rank has ended.
  char table_path[] = "/tmp/epcomm-bench-table-XXXXXX";
  const int table_fd = mkstemp(table_path);
  if (table_fd < 0) {
    std::fprintf(stderr, "epcomm-bench: cannot create a temporary file in /tmp\n");
    return 1;
  }
  close(table_fd);
  setenv(epc::bench::kTableEnv, table_path, 1);
  // A copy of our stderr that ranks inherit (no close-on-exec) for their progress lines; the
  // harness otherwise relays everything a rank prints to stdout.
  const int progress_fd = fcntl(STDERR_FILENO, F_DUPFD, 3);
  if (progress_fd >= 0) setenv(epc::bench::kProgressFdEnv, std::to_string(progress_fd).c_str(), 1);

  int code = epc::harness::run(argc, argv, epc::bench::rank_main);
  if (progress_fd >= 0) close(progress_fd);

  std::ifstream table(table_path);
  std::stringstream text;
  text << table.rdbuf();
  std::remove(table_path);
  if (!text.str().empty()) {
    std::fputs("\n", stdout);
    std::fputs(text.str().c_str(), stdout);
  }
  if (code == 77) {
    // The harness skips when GPUs are too few (its message is above); for a benchmark that
    // is a failure to measure, not a pass.
    std::fprintf(stderr, "epcomm-bench: nothing was measured\n");
    code = 1;
  }
  return code;
}
