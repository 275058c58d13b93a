// SPDX-License-Identifier: Apache-2.0
// The device-memory bandwidth of this run's GPUs, for the roofline (bench/record.hpp): a
// cudaMemcpyAsync of one large device buffer into another, timed with CUDA events (a copy of
// this size takes long enough that the events' own cost does not matter).
#pragma once

#include <cstdint>
#include <string>

#include "bench/rank_session.hpp"
#include "bench/stats.hpp"

namespace epc::bench {

constexpr int64_t kMemoryCopyBytes = int64_t{256} << 20;

// Local (no other rank takes part). `iters` copies of `bytes` after `warmup`. False only when
// CUDA failed; when the buffers cannot be allocated it returns true with `problem` set.
bool measure_memory_copy(RankSession& session, int64_t bytes, int warmup, int iters, Summary& out, std::string& problem,
                         std::string& error);

}  // namespace epc::bench
