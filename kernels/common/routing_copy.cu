// SPDX-License-Identifier: Apache-2.0
// Routing enters a handle through this copy: int64 or int32 ids become int32, and an id
// outside [-1, num_experts) is replaced by -1 (masked) and reported in the group's error
// record, so a bad value can never become an address in the communication kernels. For LL
// handles the same launch also finds what every dispatch of the routing needs: the entries
// per expert (the count tables it sends), each entry's position among its expert's entries
// in (token, top-k slot) order (where the receiver places it), each token's place on every
// rank (the tokens before it sent there: where its message lies, ll_message_index.cuh) and
// each rank's count of tokens (the messages it is sent). One warp per expert, and one per
// rank, walks the tokens in order, so all come out without atomics, the same at every launch.
#include "kernels/common/kernel_stack.hpp"
#include "kernels/device/report.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/launch.hpp"

namespace epc::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxCopyBlocks = 64;

__device__ __forceinline__ long long raw_id(const RoutingCopyParams& p, int i) {
  return p.index_bytes == 8 ? static_cast<const int64_t*>(p.topk_idx)[i] : static_cast<const int32_t*>(p.topk_idx)[i];
}

// The id an entry keeps: -1 when masked or out of range (the copy reports the latter).
__device__ __forceinline__ int kept_id(const RoutingCopyParams& p, int i) {
  const long long id = raw_id(p, i);
  return id >= 0 && id < p.num_experts ? static_cast<int>(id) : -1;
}

// Blocks [0, copy_blocks): the copy, a thread per entry.
__device__ __forceinline__ void copy_entries(const RoutingCopyParams& p, int copy_blocks) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.count; i += copy_blocks * blockDim.x) {
    const long long id = raw_id(p, i);
    const bool valid = id >= -1 && id < p.num_experts;
    if (!valid) report_failure(p.error, EPC_ERR_INVALID_ARGUMENT, kPhaseRouting, p.rank, -1, 0);
    p.out[i] = valid ? static_cast<int32_t>(id) : -1;
    if (p.entry_positions != nullptr && !(valid && id >= 0)) p.entry_positions[i] = -1;
  }
}

// Called by one warp: walks the routing's tokens in order, 32 at a time (lane l token t0 + l),
// and gives every token `first`, the sum of `count` over the tokens before it (a warp scan per
// group); returns the sum over all of them.
template <typename Count, typename Give>
__device__ __forceinline__ int warp_scan_tokens(const RoutingCopyParams& p, Count count, Give give) {
  const int tokens = p.topk > 0 ? p.count / p.topk : 0;
  const int lane = lane_id();
  int running = 0;
  for (int t0 = 0; t0 < tokens; t0 += kWarpSize) {
    const int t = t0 + lane;
    const int mine = t < tokens ? count(t) : 0;
    int upto = mine;  // inclusive scan over the lanes
    for (int d = 1; d < kWarpSize; d *= 2) {
      const int other = __shfl_up_sync(0xffffffffu, upto, d);
      if (lane >= d) upto += other;
    }
    if (t < tokens) give(t, running + upto - mine);
    running += __shfl_sync(0xffffffffu, upto, kWarpSize - 1);
  }
  return running;
}

// Expert e's warp: a token's entries of e take the next positions of e, in slot order; the
// total is e's count.
__device__ __forceinline__ void place_expert_entries(const RoutingCopyParams& p, int e) {
  const int K = p.topk;
  const int total = warp_scan_tokens(
      p,
      [&](int t) {
        int matches = 0;
        for (int j = 0; j < K; ++j) matches += kept_id(p, t * K + j) == e;
        return matches;
      },
      [&](int t, int first) {
        for (int j = 0; j < K; ++j) {
          if (kept_id(p, t * K + j) == e) p.entry_positions[t * K + j] = first++;
        }
      });
  if (lane_id() == 0) p.expert_entries[e] = total;
}

// Rank d's warp: a token with an unmasked entry on d takes the next place there; the total
// is d's count of tokens.
__device__ __forceinline__ void place_tokens_on_rank(const RoutingCopyParams& p, int d) {
  const int K = p.topk;
  const int total = warp_scan_tokens(
      p,
      [&](int t) {
        for (int j = 0; j < K; ++j) {
          const int id = kept_id(p, t * K + j);
          if (id >= 0 && id / p.local_experts == d) return 1;
        }
        return 0;
      },
      [&](int t, int first) { p.token_places[static_cast<size_t>(t) * p.ranks + d] = first; });
  if (lane_id() == 0) p.rank_tokens[d] = total;
}

// Blocks past the copy's: a warp per expert, then a warp per rank.
__global__ void routing_copy_kernel(RoutingCopyParams p, int copy_blocks) {
  if (static_cast<int>(blockIdx.x) < copy_blocks) {
    copy_entries(p, copy_blocks);
    return;
  }
  const int warps = kThreads / kWarpSize;
  const int w = (static_cast<int>(blockIdx.x) - copy_blocks) * warps + static_cast<int>(threadIdx.x) / kWarpSize;
  if (w < p.num_experts) {
    place_expert_entries(p, w);
  } else if (w - p.num_experts < p.ranks) {
    place_tokens_on_rank(p, w - p.num_experts);
  }
}

}  // namespace

cudaError_t launch_routing_copy(const RoutingCopyParams& params, cudaStream_t stream) {
  if (params.count == 0 && params.expert_entries == nullptr) return cudaSuccess;
  const int needed = (params.count + kThreads - 1) / kThreads;
  const int copy_blocks = needed < 1 ? 1 : (needed < kMaxCopyBlocks ? needed : kMaxCopyBlocks);
  const int warps = kThreads / kWarpSize;
  const int routing_warps = params.expert_entries == nullptr ? 0 : params.num_experts + params.ranks;
  const int expert_blocks = (routing_warps + warps - 1) / warps;
  routing_copy_kernel<<<copy_blocks + expert_blocks, kThreads, 0, stream>>>(params, copy_blocks);
  return cudaGetLastError();
}

size_t routing_copy_local_bytes() { return max_local_bytes(routing_copy_kernel); }

}  // namespace epc::kernels
