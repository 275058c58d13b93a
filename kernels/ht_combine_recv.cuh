// High-throughput combine, receiving part. Each warp takes tokens of this rank: it waits for
// the flags of the returned-row chunks holding the token's rows (the layout says which row
// of each rank's stream the token is), then sums each token's rows over
// the ranks that received it, in ascending rank order, in fp32, rounding once to bf16; for
// the backward pass, entry k's weight comes from the rank hosting entry k's expert. Rows
// this rank returned to itself are never copied: they are read from the caller's x.
#pragma once

#include "kernels/device/bf16.cuh"
#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/peer_wait.cuh"
#include "kernels/ht_params.hpp"
#include "kernels/ht_warp_roles.cuh"

namespace epc::kernels::ht_combine_recv {

constexpr int kChannelsPerVector = 8;

// The flags of the returned-row chunks holding token t's rows, lanes splitting the ranks.
__device__ __forceinline__ bool wait_for_rows(const HtCombineParams& p, uint64_t step, int t) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int per_source = ht_chunks(g.max_tokens);
  const int32_t* rows = c.handle.token_row + static_cast<size_t>(t) * g.nranks;
  bool ok = true;
  for (int d = lane_id(); d < g.nranks && ok; d += kWarpSize) {
    const int row = rows[d];
    if (row < 0 || d == g.rank) continue;  // not sent there, or this rank's own row (the caller's x)
    auto* word = static_cast<uint64_t*>(c.transport.local(
        p.channel.flags_offset + (static_cast<uint64_t>(d) * per_source + row / kHtChunkTokens) * sizeof(uint64_t)));
    uint64_t flag = 0;
    ok = wait_for_flag(word, ChunkFlagOf{chunk_epoch(step)}, &flag, c.timeout_ns, c.error, kPhaseHtCombine, g.rank, d);
  }
  __syncwarp();
  return __all_sync(0xffffffffu, ok);
}

__device__ __forceinline__ const char* returned_slot(const HtCombineParams& p, int dest, int row) {
  const HtGeometry& g = p.common.geo;
  return static_cast<const char*>(p.common.transport.local(
      p.channel.data_offset + (static_cast<uint64_t>(dest) * g.max_tokens + row) * g.combine_slot.bytes));
}

// The bf16 row rank `dest` returned for a token: this rank's own rows are read in place.
__device__ __forceinline__ const int4* returned_row(const HtCombineParams& p, int dest, int row) {
  const HtGeometry& g = p.common.geo;
  if (dest == g.rank) {
    return reinterpret_cast<const int4*>(p.x + static_cast<size_t>(p.common.handle.recv_base[dest] + row) * g.hidden);
  }
  return reinterpret_cast<const int4*>(returned_slot(p, dest, row));
}

// The backward weight of entry k that rank `dest` returned for a token.
__device__ __forceinline__ float returned_weight(const HtCombineParams& p, int dest, int row, int k) {
  const HtGeometry& g = p.common.geo;
  if (dest == g.rank) return p.weights[static_cast<size_t>(p.common.handle.recv_base[dest] + row) * g.topk + k];
  return __ldcg(reinterpret_cast<const float*>(returned_slot(p, dest, row) + g.combine_slot.weights_offset) + k);
}

// Vectors per lane, and source rows, whose loads are in flight together.
constexpr int kReduceVectors = 2;
constexpr int kReduceSources = 4;

__device__ __forceinline__ void reduce_token(const HtCombineParams& p, int t) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int lane = lane_id();
  const int32_t* rows = c.handle.token_row + static_cast<size_t>(t) * g.nranks;
  const int vectors = g.hidden / kChannelsPerVector;
  int4* out = reinterpret_cast<int4*>(p.out + static_cast<size_t>(t) * g.hidden);
  for (int base = 0; base < vectors; base += kReduceVectors * kWarpSize) {
    float acc[kReduceVectors][kChannelsPerVector];
#pragma unroll
    for (int u = 0; u < kReduceVectors; ++u) {
#pragma unroll
      for (int e = 0; e < kChannelsPerVector; ++e) acc[u][e] = 0.0f;
    }
    for (int first = 0; first < g.nranks; first += kWarpSize) {
      // Lane i holds the row rank first + i returned for this token, if it received it.
      const int mine = first + lane;
      const int row = mine < g.nranks ? rows[mine] : -1;
      const int4* my_src = row >= 0 ? returned_row(p, mine, row) : nullptr;
      unsigned rest = __ballot_sync(0xffffffffu, row >= 0);
      while (rest != 0) {
        // Up to kReduceSources rows loaded at once, then added in ascending rank order.
        int4 raw[kReduceSources][kReduceVectors];
        int taken = 0;
#pragma unroll
        for (int s = 0; s < kReduceSources; ++s) {
          if (rest == 0) break;
          const int owner = __ffs(rest) - 1;
          rest &= rest - 1;
          const int4* src = reinterpret_cast<const int4*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(my_src), owner));
#pragma unroll
          for (int u = 0; u < kReduceVectors; ++u) {
            const int i = base + u * kWarpSize + lane;
            raw[s][u] = i < vectors ? __ldcg(src + i) : make_int4(0, 0, 0, 0);
          }
          ++taken;
        }
#pragma unroll
        for (int s = 0; s < kReduceSources; ++s) {
          if (s >= taken) break;
#pragma unroll
          for (int u = 0; u < kReduceVectors; ++u) {
            const uint16_t* bits = reinterpret_cast<const uint16_t*>(&raw[s][u]);
#pragma unroll
            for (int e = 0; e < kChannelsPerVector; ++e) acc[u][e] = __fadd_rn(acc[u][e], bf16_bits_to_float(bits[e]));
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kReduceVectors; ++u) {
      const int i = base + u * kWarpSize + lane;
      if (i >= vectors) continue;
      uint16_t packed[kChannelsPerVector];
#pragma unroll
      for (int e = 0; e < kChannelsPerVector; ++e) packed[e] = float_to_bf16_bits(acc[u][e]);
      out[i] = *reinterpret_cast<const int4*>(packed);
    }
  }
  const int k = lane_id();
  if (p.out_weights != nullptr && k < g.topk) {
    const int expert = c.handle.topk_idx[t * g.topk + k];
    float weight = 0.0f;
    if (expert >= 0) {
      const int dest = expert / g.local_experts;
      weight = returned_weight(p, dest, rows[dest], k);
    }
    p.out_weights[static_cast<size_t>(t) * g.topk + k] = weight;
  }
}

// Returns false when a wait failed (recorded in the group's error). Tokens, not chunks, are
// dealt to warps: a token's reduction is the slow part, so a warp holding a whole chunk at
// the end would stretch the tail.
__device__ __forceinline__ bool run(const HtCombineParams& p, uint64_t step, const WarpRole& role) {
  for (int t = role.index; t < p.common.num_tokens; t += role.count) {
    if (!wait_for_rows(p, step, t)) return false;
    reduce_token(p, t);
  }
  return true;
}

}  // namespace epc::kernels::ht_combine_recv
