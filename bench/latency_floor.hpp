// SPDX-License-Identifier: Apache-2.0
// The latency floor of a low-latency step, measured in the same run: the GPU time of an
// empty kernel launched on our grid (the group's SM budget in blocks of kLlThreads threads,
// the grid of the LL launches, kernels/ll/ll_step_kernel.cuh), from CUPTI's kernel records
// like the cupti columns. A call launches at least one kernel on that grid and a step at
// least two (dispatch, combine), so:
//   call: the span of one empty kernel;
//   step: the span of two empty kernels launched back to back.
// No kernel of ours can finish a call or a step faster on this GPU.
#pragma once

#include <string>

#include "bench/kernel_tracer.hpp"
#include "bench/rank_session.hpp"
#include "bench/stats.hpp"

namespace epc::bench {

// Threads per block of the low-latency kernels.
int ll_block_threads();

// Local (no other rank takes part). `iters` calls and steps after a few untimed launches;
// false only when CUDA failed. Without figures (the tracer failed) it returns true with
// `problem` set.
bool measure_latency_floor(RankSession& session, KernelTracer& tracer, int blocks, int iters, Summary& call,
                           Summary& step, std::string& problem, std::string& error);

}  // namespace epc::bench
