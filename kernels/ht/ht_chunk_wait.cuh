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

// A row to wait for: row `row` of stream `stream` in the flags at `flags_offset`, whose flag
// rank `writer` raises.
struct ChunkRow {
  int stream;
  int row;
  int writer;
};

// `row_of(i, &r)` names candidate i (0 <= i < count) in r, or returns false when there is
// nothing to wait for. Every lane returns the warp's outcome: false when a wait failed
// (recorded in the group's error as `phase`).
template <typename RowOf>
__device__ __forceinline__ bool warp_wait_for_chunk_rows(const HtCommon& c, uint64_t flags_offset, uint64_t step,
                                                         int count, uint32_t phase, RowOf row_of) {
  const HtGeometry& g = c.geo;
  bool ok = true;
  for (int i = lane_id(); i < count && ok; i += kWarpSize) {
    ChunkRow r;
    if (!row_of(i, &r)) continue;
    const uint64_t word = ht_chunk_flag_word(flags_offset, r.stream, r.row / kHtChunkTokens, g.max_tokens);
    uint64_t flag = 0;
    ok = wait_for_signal(c.transport, word, r.writer, ChunkFlagOf{chunk_epoch(step)}, &flag, c.timeout_ns, c.error,
                         phase, g.rank, r.writer);
  }
  __syncwarp();
  return __all_sync(0xffffffffu, ok);
}

}  // namespace epc::kernels
