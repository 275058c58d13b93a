// SPDX-License-Identifier: Apache-2.0
// Routing enters a handle through this copy: int64 or int32 ids become int32, and an id
// outside [-1, num_experts) is replaced by -1 (masked) and reported in the group's error
// record, so a bad value can never become an address in the communication kernels. For LL
// handles the same launch also finds what every dispatch of the routing needs: the entries
// per expert (the count tables it sends) and each entry's position among its expert's
// entries in (token, top-k slot) order (where the receiver places it), and in the token
// layouts each token's place on every rank (the tokens before it sent there). One warp per
// expert, and one per rank, walks the tokens in order, so all come out without atomics, the
// same at every launch.
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

// Expert e's warp: lane l holds token t0 + l of each group of 32 tokens; the lanes' matches
// of e, scanned across the warp, give each matching entry its position, and the running
// total ends as the expert's count.
__device__ __forceinline__ void place_expert_entries(const RoutingCopyParams& p, int e) {
  const int K = p.topk;
  const int tokens = K > 0 ? p.count / K : 0;
  const int lane = lane_id();
  int running = 0;
  for (int t0 = 0; t0 < tokens; t0 += kWarpSize) {
    const int t = t0 + lane;
    int matches = 0;
    if (t < tokens) {
      for (int j = 0; j < K; ++j) matches += kept_id(p, t * K + j) == e;
    }
    int before = matches;  // inclusive scan over the lanes
    for (int d = 1; d < kWarpSize; d *= 2) {
      const int other = __shfl_up_sync(0xffffffffu, before, d);
      if (lane >= d) before += other;
    }
    const int total = __shfl_sync(0xffffffffu, before, kWarpSize - 1);
    int position = running + before - matches;
    for (int j = 0; matches > 0 && j < K; ++j) {
      if (kept_id(p, t * K + j) == e) p.entry_positions[t * K + j] = position++;
    }
    running += total;
  }
  if (lane == 0) p.expert_entries[e] = running;
}

// Rank d's warp: lane l holds token t0 + l of each group of 32 tokens; a token with an
// unmasked entry on d takes the next place there.
__device__ __forceinline__ void place_tokens_on_rank(const RoutingCopyParams& p, int d) {
  const int K = p.topk;
  const int tokens = K > 0 ? p.count / K : 0;
  const int lane = lane_id();
  int running = 0;
  for (int t0 = 0; t0 < tokens; t0 += kWarpSize) {
    const int t = t0 + lane;
    bool sent = false;
    for (int j = 0; t < tokens && j < K && !sent; ++j) {
      const int id = kept_id(p, t * K + j);
      sent = id >= 0 && id / p.local_experts == d;
    }
    const unsigned senders = __ballot_sync(0xffffffffu, sent);
    if (t < tokens)
      p.token_places[static_cast<size_t>(t) * p.ranks + d] = running + __popc(senders & ((1u << lane) - 1u));
    running += __popc(senders);
  }
}

// Blocks past the copy's: a warp per expert, then (token layouts) a warp per rank.
__global__ void routing_copy_kernel(RoutingCopyParams p, int copy_blocks) {
  if (static_cast<int>(blockIdx.x) < copy_blocks) {
    copy_entries(p, copy_blocks);
    return;
  }
  const int warps = kThreads / kWarpSize;
  const int w = (static_cast<int>(blockIdx.x) - copy_blocks) * warps + static_cast<int>(threadIdx.x) / kWarpSize;
  if (w < p.num_experts) {
    place_expert_entries(p, w);
  } else if (p.token_places != nullptr && w - p.num_experts < p.ranks) {
    place_tokens_on_rank(p, w - p.num_experts);
  }
}

}  // namespace

cudaError_t launch_routing_copy(const RoutingCopyParams& params, cudaStream_t stream) {
  if (params.count == 0 && params.expert_entries == nullptr) return cudaSuccess;
  const int needed = (params.count + kThreads - 1) / kThreads;
  const int copy_blocks = needed < 1 ? 1 : (needed < kMaxCopyBlocks ? needed : kMaxCopyBlocks);
  const int warps = kThreads / kWarpSize;
  const int routing_warps =
      params.expert_entries == nullptr ? 0 : params.num_experts + (params.token_places != nullptr ? params.ranks : 0);
  const int expert_blocks = (routing_warps + warps - 1) / warps;
  routing_copy_kernel<<<copy_blocks + expert_blocks, kThreads, 0, stream>>>(params, copy_blocks);
  return cudaGetLastError();
}

size_t routing_copy_local_bytes() { return max_local_bytes(routing_copy_kernel); }

}  // namespace epc::kernels
