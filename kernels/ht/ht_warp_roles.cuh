// SPDX-License-Identifier: Apache-2.0
// How a high-throughput launch splits its warps. Fused, every block gives its first warps
// to sending and the others to receiving, so the receiving ranks copy rows
// out while the senders are still writing them; a launch with one part gives it every warp.
// Work items (chunks) are dealt to the warps of a role across blocks first, so a few items
// still spread over many SMs.
#pragma once

#include "kernels/device/warp.cuh"
#include "kernels/wire/limits.hpp"

namespace epc::kernels {

// Every part handles a token's top-k entries one per lane of the warp that holds it.
static_assert(kMaxTopk <= kWarpSize, "one lane per top-k entry");

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

// Work spread over streams (rows from each source, rows back to each source, chunks for
// each node) is dealt round-robin over the streams a role serves, numbered from the one
// after this rank's own: item i is chunk i / S of stream number i % S, so a warp's
// consecutive items, and the ranks' first items, touch different ranks instead of every
// rank hammering rank 0 first. Items past a shorter stream's end are skipped. Streams the
// role never serves (this rank's own rows, which do not travel) are left out of the deal
// rather than dealt and skipped: a warp's role index is warp * blocks + block, so with the
// block count a multiple of the stream count the stream depends on the block alone, and
// the blocks dealt a skipped stream sat idle in that role (on 2 ranks, half the SMs sent
// nothing in combine and received nothing in dispatch).
template <typename StreamOf, typename ChunksOf>
struct RoundRobinDeal {
  int streams;         // S
  StreamOf stream_of;  // stream number (0 .. S-1) -> stream (a rank, or a node)
  ChunksOf chunks_of;  // stream -> its chunks
  int items;

  __device__ RoundRobinDeal(int count, StreamOf of, ChunksOf chunks)
      : streams(count), stream_of(of), chunks_of(chunks), items(0) {
    int rounds = 0;
    for (int k = 0; k < streams; ++k) rounds = max(rounds, chunks_of(stream_of(k)));
    items = rounds * streams;
  }

  // Item i's stream and chunk; false when the chunk is past that stream's end.
  __device__ bool item(int i, int* stream, int* chunk) const {
    *stream = stream_of(i % streams);
    *chunk = i / streams;
    return *chunk < chunks_of(*stream);
  }
};

}  // namespace epc::kernels
