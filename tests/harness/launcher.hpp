// SPDX-License-Identifier: Apache-2.0
// Launcher mode: start one child process per rank and report how they ended.
#ifndef EPC_TESTS_GPU_HARNESS_LAUNCHER_HPP
#define EPC_TESTS_GPU_HARNESS_LAUNCHER_HPP

#include "harness.hpp"

namespace epc::harness {

// Returns 0 when every rank passed, 1 when one failed or the world could not be started,
// 2 for malformed flags, 77 when there are no or too few GPUs.
int run_launcher(int argc, char** argv, const Options& options);

}  // namespace epc::harness

#endif  // EPC_TESTS_GPU_HARNESS_LAUNCHER_HPP
