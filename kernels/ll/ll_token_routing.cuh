// SPDX-License-Identifier: Apache-2.0
// Where one token goes in a low-latency dispatch, worked out by a whole block into shared
// memory: its unmasked entries, the ranks hosting them, each entry's index inside its
// rank's message, and each entry's position among this rank's entries for the same expert
// in (token, top-k slot) order, which lets receivers place rows without scanning.
#pragma once

#include "kernels/device/warp.cuh"
#include "kernels/wire/limits.hpp"
#include "kernels/wire/ll_params.hpp"

namespace epc::kernels {

// The first warp of the block routes the token, lane j holding entry j, and fills arrays of
// one element per lane.
static_assert(kMaxTopk == kWarpSize, "route_token gives each top-k entry one lane of a warp");

struct TokenRoute {
  int expert[kMaxTopk];  // global expert id, -1 when masked or j >= K
  float weight[kMaxTopk];
  int position[kMaxTopk];       // entries for the same expert before this one
  int index_on_rank[kMaxTopk];  // entry's index in its rank's message header
  int dest[kMaxTopk];           // distinct ranks hosting an entry
  int dest_entries[kMaxTopk];   // entries on dest[i]
  int num_dests;

  __device__ int entries_on_rank(int rank) const {
    for (int i = 0; i < num_dests; ++i) {
      if (dest[i] == rank) return dest_entries[i];
    }
    return 0;
  }
};

// Fills `route` (shared) for token t. Called by every thread of the block; ends synchronised.
// `positions`: also each entry's position (else only its own token's earlier slots count).
__device__ __forceinline__ void route_token(const LlCommon& c, const float* weights, int t, TokenRoute* route,
                                            bool positions = true) {
  const int32_t* idx = c.handle.topk_idx;
  const int K = c.topk;
  if (threadIdx.x < kWarpSize) {
    const int j = threadIdx.x;
    const int expert = j < K ? idx[t * K + j] : -1;
    route->expert[j] = expert;
    route->weight[j] = j < K ? weights[t * K + j] : 0.0f;
    const unsigned lower_lanes = (1u << j) - 1u;
    // Earlier slots of this token with the same expert; earlier tokens' entries follow.
    route->position[j] = __popc(__match_any_sync(0xffffffffu, expert) & lower_lanes);
    const int dest = expert >= 0 ? expert / c.geo.local_experts : -1;
    const unsigned same_dest = __match_any_sync(0xffffffffu, dest);
    route->index_on_rank[j] = __popc(same_dest & lower_lanes);
    // The lowest lane of each destination lists it.
    const bool leader = dest >= 0 && (same_dest & lower_lanes) == 0;
    const unsigned leaders = __ballot_sync(0xffffffffu, leader);
    if (leader) {
      const int i = __popc(leaders & lower_lanes);
      route->dest[i] = dest;
      route->dest_entries[i] = __popc(same_dest);
    }
    if (j == 0) route->num_dests = __popc(leaders);
  }
  __syncthreads();
  // Positions: plus the matches of each entry's expert among the earlier tokens' entries.
  const int end = positions ? t * K : 0;
  for (int f = threadIdx.x; f < end; f += blockDim.x) {
    const int id = idx[f];
    if (id < 0) continue;
    for (int j = 0; j < K; ++j) {
      if (route->expert[j] == id) atomicAdd(&route->position[j], 1);
    }
  }
  if (end > 0) __syncthreads();
}

}  // namespace epc::kernels
