// SPDX-License-Identifier: Apache-2.0
// The latency floor of a low-latency step, measured in the same run: the GPU time of an
// empty kernel launched on our grid (the group's SM budget in blocks of kLlThreads threads,
// the grid of the LL launches, kernels/ll/ll_step_kernel.cuh), from CUPTI's kernel records
// like the cupti columns. A call launches at least one kernel on that grid and a step at
// least two (dispatch, combine), so:
//   call: the span of one empty kernel;
//   step: the span of two empty kernels launched back to back;
//   graph call, graph step: the same inside a graph's replay, where no host paces the
//   launches (the floor of the cupti_graph columns).
// No kernel of ours can finish a call or a step faster on this GPU. Beside them, the least
// work a dispatch of one token does on that grid:
//   routed row: a kernel whose first blocks each load a slice of one row (hidden 16-bit
//   channels, the way an LL launch splits a row over up to 8 blocks) and the token's top-k
//   expert ids, then store the slice into the row of each of those experts: one load, and
//   stores at addresses it gives. No dispatch (which also places rows and writes counts and
//   records) can be faster on this GPU; the floor to hold our calls against where the
//   empty kernel leaves out what any dispatch must do.
#pragma once

#include <string>

#include "bench/kernel_tracer.hpp"
#include "bench/l2_sweep.hpp"
#include "bench/rank_session.hpp"
#include "bench/stats.hpp"

namespace epc::bench {

// Threads per block of the low-latency kernels.
int ll_block_threads();

// The routed row's shape: the row's 16-bit channels, the token's entries, the experts whose
// rows they name.
struct RoutedRowShape {
  int hidden = 0;
  int topk = 0;
  int experts = 0;
};

// Local (no other rank takes part). `iters` calls, steps and routed rows after a few untimed
// launches, then `iters` graph steps after an untimed replay; false only when CUDA failed.
// Without figures (the tracer failed) it returns true with `problem` set. With a `sweep`
// (--cold-l2), the L2 is swept before every timed step and routed row, as before the steps
// of ours, so that each kernel fetches its code (and the routed row its row) from HBM.
bool measure_latency_floor(RankSession& session, KernelTracer& tracer, const L2Sweep* sweep, int blocks, int iters,
                           const RoutedRowShape& shape, Summary& call, Summary& step, Summary& routed_row,
                           Summary& graph_call, Summary& graph_step, std::string& problem, std::string& error);

}  // namespace epc::bench
