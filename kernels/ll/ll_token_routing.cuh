// SPDX-License-Identifier: Apache-2.0
// Where one token goes in a low-latency dispatch, worked out by a whole block into shared
// memory: its unmasked entries, the ranks hosting them, each entry's index inside its
// rank's message, each entry's position among this rank's entries for the same expert in
// (token, top-k slot) order (EXPERT_PADDED; found when the routing was set,
// kernels/common/routing_copy.cu) and, for every rank, the tokens before this one sent there
// (found when the routing was set too: where the token's message lies there,
// ll_message_index.cuh, and in the token layouts its row's place), which lets receivers place
// rows without scanning.
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

// Lane j's entry of a token: its global expert id (-1 when masked or j >= K), weight (0
// without weights) and position among its expert's entries (the handle's entry_positions).
// Loaded apart from route_token so that a sending launch can load its first token's entries
// before it claims the step's slot.
struct TokenEntry {
  int expert;
  float weight;
  int position;
};

// Called by the first warp: lane j's entry of token t. `weights` may be null.
__device__ __forceinline__ TokenEntry load_token_entry(const LlCommon& c, const float* weights, int t) {
  TokenEntry e{-1, 0.0f, 0};
  const int j = static_cast<int>(threadIdx.x);
  if (j < c.topk) {
    e.expert = c.handle.topk_idx[t * c.topk + j];
    e.position = c.handle.entry_positions[t * c.topk + j];
    if (weights != nullptr) e.weight = weights[t * c.topk + j];
  }
  return e;
}

// Token t's place on rank threadIdx.x (the handle's token_places; 0 for a thread past the
// ranks), loaded apart from route_token for the reason TokenEntry is.
__device__ __forceinline__ int load_token_place(const LlCommon& c, int t) {
  const int d = static_cast<int>(threadIdx.x);
  return d < c.geo.nranks ? c.handle.token_places[static_cast<size_t>(t) * c.geo.nranks + d] : 0;
}

// Fills `route` (shared) for token t, whose entries the first warp's lanes hold in `entry`
// (load_token_entry), and `places` (shared, [nranks]) with the token's place on every rank,
// this thread's in `place` (load_token_place). `expert_positions`: each entry's position is its
// position among its expert's entries of the whole routing (loaded with the entry), else only
// among the token's own earlier entries. Called by every thread of the block; ends
// synchronised.
__device__ __forceinline__ void route_token(const LlCommon& c, TokenEntry entry, int t, TokenRoute* route,
                                            bool expert_positions, int* places, int place) {
  if (threadIdx.x < kWarpSize) {
    const int j = threadIdx.x;
    const int expert = entry.expert;
    route->expert[j] = expert;
    route->weight[j] = entry.weight;
    const unsigned lower_lanes = (1u << j) - 1u;
    const unsigned same_expert = __match_any_sync(0xffffffffu, expert);
    route->position[j] = expert_positions ? entry.position : __popc(same_expert & lower_lanes);
    const int dest = expert >= 0 ? c.geo.rank_of_expert(expert) : -1;
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
  const int d0 = static_cast<int>(threadIdx.x);
  if (d0 < c.geo.nranks) places[d0] = place;
  for (int d = d0 + static_cast<int>(blockDim.x); d < c.geo.nranks; d += blockDim.x) {
    places[d] = c.handle.token_places[static_cast<size_t>(t) * c.geo.nranks + d];
  }
  __syncthreads();
}

}  // namespace epc::kernels
