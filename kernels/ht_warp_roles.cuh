// How a high-throughput launch splits its warps. Fused, every block gives its first warps
// to sending and the others to receiving, so the receiving ranks copy rows
// out while the senders are still writing them; a launch with one part gives it every warp.
// Work items (chunks) are dealt to the warps of a role across blocks first, so a few items
// still spread over many SMs.
#pragma once

#include "kernels/device/warp.cuh"

namespace epc::kernels {

constexpr int kHtThreads = 1024;
constexpr int kHtWarps = kHtThreads / kWarpSize;

enum class HtRole { kSend, kForward, kReceive };

struct WarpRole {
  HtRole kind;
  int index;  // among the warps of this role in the grid
  int count;  // warps of this role in the grid
};

// `send_warps` / `forward_warps`: warps per block that send / forward in a fused launch (the
// rest receive); a launch with the sending part only gives it every warp, one with the
// receiving part only gives its first `forward_warps` to forwarding.
template <bool kSend, bool kReceive>
__device__ __forceinline__ WarpRole warp_role(int send_warps, int forward_warps) {
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int blocks = static_cast<int>(gridDim.x), block = static_cast<int>(blockIdx.x);
  if (kSend && !kReceive) return WarpRole{HtRole::kSend, warp * blocks + block, kHtWarps * blocks};
  const int senders = kSend ? send_warps : 0;
  if (warp < senders) return WarpRole{HtRole::kSend, warp * blocks + block, senders * blocks};
  if (warp < senders + forward_warps) {
    return WarpRole{HtRole::kForward, (warp - senders) * blocks + block, forward_warps * blocks};
  }
  const int receivers = kHtWarps - senders - forward_warps;
  return WarpRole{HtRole::kReceive, (warp - senders - forward_warps) * blocks + block, receivers * blocks};
}

// Work spread over one stream per rank (rows from each source, rows back to each source)
// is dealt round-robin: item i is chunk i / R of stream (i + this rank) % R, so a warp's
// consecutive items, and the ranks' first items, touch different ranks instead of every
// rank hammering rank 0 first. Items past a shorter stream's end are skipped.
template <typename ChunksOf>
__device__ __forceinline__ int round_robin_items(int nranks, ChunksOf chunks) {
  int rounds = 0;
  for (int s = 0; s < nranks; ++s) rounds = max(rounds, chunks(s));
  return rounds * nranks;
}

}  // namespace epc::kernels
