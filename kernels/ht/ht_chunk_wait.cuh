// SPDX-License-Identifier: Apache-2.0
// A warp's wait for the chunk flags of the rows one token is made of (combine's receivers
// and, across nodes, its reducers): lanes split the token's candidate rows, and each lane
// waits, bounded by the group's timeout, for the flag of the chunk holding its row.
#pragma once

#include <cstdint>

#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/wire/ht_params.hpp"

namespace epc::kernels {

// Candidate i (0 <= i < count) is row `row_of(i)` (-1: nothing to wait for) of stream
// `stream_of(i)` in the flags at `flags_offset`, whose flag rank `writer_of(i)` raises.
// Every lane returns the warp's outcome: false when a wait failed (recorded in the group's
// error as `phase`).
template <typename RowOf, typename StreamOf, typename WriterOf>
__device__ __forceinline__ bool warp_wait_for_chunk_rows(const HtCommon& c, uint64_t flags_offset, uint64_t step,
                                                         int count, uint32_t phase, RowOf row_of, StreamOf stream_of,
                                                         WriterOf writer_of) {
  const HtGeometry& g = c.geo;
  bool ok = true;
  for (int i = lane_id(); i < count && ok; i += kWarpSize) {
    const int row = row_of(i);
    if (row < 0) continue;
    const uint64_t word = ht_chunk_flag_word(flags_offset, stream_of(i), row / kHtChunkTokens, g.max_tokens);
    const int writer = writer_of(i);
    uint64_t flag = 0;
    ok = wait_for_signal(c.transport, word, writer, ChunkFlagOf{chunk_epoch(step)}, &flag, c.timeout_ns, c.error, phase,
                         g.rank, writer);
  }
  __syncwarp();
  return __all_sync(0xffffffffu, ok);
}

}  // namespace epc::kernels
