// SPDX-License-Identifier: Apache-2.0
// High-throughput dispatch, receiving part. Each warp takes (source rank, chunk) items:
// it waits for the chunk's flag, which carries the row range [start, end) the chunk filled
// in this rank's slots of that source, and copies those rows to the caller's outputs at row
// recv_base[source] + j, so rows come out ordered by (source rank, source token).
#pragma once

#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/row_copy.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/ht/ht_packed_rows.cuh"
#include "kernels/ht/ht_warp_roles.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ht_params.hpp"

namespace epc::kernels::ht_dispatch_recv {

// EXPERT_PACKED: the slot [source][j]'s row into the rows of its local entries.
__device__ __forceinline__ void copy_packed(const HtDispatchParams& p, const char* slot, int source, int j) {
  const HtGeometry& g = p.common.geo;
  const int k = lane_id();
  int q = -1;
  float weight = 0.0f;
  if (k < g.topk) {
    q = __ldcg(reinterpret_cast<const int32_t*>(slot + g.dispatch_slot.topk_offset) + k);
    weight = __ldcg(reinterpret_cast<const float*>(slot + g.dispatch_slot.weights_offset) + k);
  }
  write_packed_rows<RowLoad::kCoherent>(p, reinterpret_cast<const int4*>(slot), slot + p.scales_offset, q, weight,
                                        source, j);
}

__device__ __forceinline__ void copy_row(const HtDispatchParams& p, const char* slot, int row) {
  const HtGeometry& g = p.common.geo;
  const int lane = lane_id();
  int4* dst = reinterpret_cast<int4*>(static_cast<char*>(p.out_x) + static_cast<size_t>(row) * p.row_bytes);
  warp_copy_row_segmented<RowLoad::kCoherent>(dst, reinterpret_cast<const int4*>(slot), p.row_bytes / 16);
  if (p.scale_bytes > 0) {
    warp_copy_scales<RowLoad::kCoherent>(static_cast<char*>(p.out_scales) + static_cast<size_t>(row) * p.scale_bytes,
                                         slot + p.scales_offset, p.scale_bytes);
  }
  if (lane < g.topk) {
    const size_t at = static_cast<size_t>(row) * g.topk + lane;
    if (p.out_topk_idx != nullptr) {
      const int32_t local = __ldcg(reinterpret_cast<const int32_t*>(slot + g.dispatch_slot.topk_offset) + lane);
      p.out_topk_idx[at] = local >= 0 ? local + p.expert_id_base : local;
    }
    if (p.out_topk_weights != nullptr) {
      p.out_topk_weights[at] = __ldcg(reinterpret_cast<const float*>(slot + g.dispatch_slot.weights_offset) + lane);
    }
  }
}

// The layout's counts, for callers who asked for them.
template <bool kPacked>
__device__ __forceinline__ void write_counts(const HtDispatchParams& p) {
  const HtCommon& c = p.common;
  if (blockIdx.x != 0) return;
  if (p.out_expert_counts != nullptr) {
    for (int l = threadIdx.x; l < c.geo.local_experts; l += blockDim.x)
      p.out_expert_counts[l] = c.handle.expert_counts[l];
  }
  if (p.acc_expert_counts != nullptr) {
    for (int l = threadIdx.x; l < c.geo.local_experts; l += blockDim.x)
      p.acc_expert_counts[l] += c.handle.expert_counts[l];
  }
  if constexpr (!kPacked) {
    if (p.out_num_recv != nullptr && threadIdx.x == 0) *p.out_num_recv = c.handle.recv_base[c.geo.nranks];
    return;
  }
  const int L = c.geo.local_experts;
  for (int l = threadIdx.x; l <= L; l += blockDim.x) {
    if (p.out_expert_offsets != nullptr) p.out_expert_offsets[l] = c.handle.expert_offsets[l];
    if (p.out_expert_offsets64 != nullptr) p.out_expert_offsets64[l] = c.handle.expert_offsets[l];
  }
  // The block's last warp sums the counts, a lane per expert: in a fused launch it receives,
  // while the first warps send (one thread's loop over every expert held up a sending warp).
  if (p.out_num_recv != nullptr && static_cast<int>(threadIdx.x) >= static_cast<int>(blockDim.x) - kWarpSize) {
    int entries = 0;
    for (int l = lane_id(); l < L; l += kWarpSize) entries += c.handle.expert_counts[l];
    entries = warp_sum(entries);
    if (lane_id() == 0) *p.out_num_recv = entries;
  }
}

// What receiving launches do first: EXPERT_PACKED padding (every block), the counts (block 0).
// kPacked: EXPERT_PACKED (a template flag, so that FLAT kernels carry none of its code).
template <bool kPacked>
__device__ __forceinline__ void prologue(const HtDispatchParams& p) {
  if (kPacked && p.zero_padding) zero_packed_padding(p);
  write_counts<kPacked>(p);
}

// Returns false when a wait failed (recorded in the group's error).
template <bool kPacked>
__device__ __forceinline__ bool run(const HtDispatchParams& p, uint64_t step, const WarpRole& role) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  // Every source but this rank, whose own rows the senders wrote straight to out_x.
  auto other_source = [&g](int k) { return ring_member_after(g.rank, k, g.nranks); };
  auto chunks_of = [&c](int s) { return ht_chunks(c.handle.source_tokens[s]); };
  const RoundRobinDeal deal(g.nranks - 1, other_source, chunks_of);
  for (int item = role.index; item < deal.items; item += role.count) {
    int source, chunk;
    if (!deal.item(item, &source, &chunk)) continue;
    uint64_t flag = 0;
    bool ok = true;
    if (lane_id() == 0) {
      const uint64_t word = ht_chunk_flag_word(p.channel.flags_offset, source, chunk, g.max_tokens);
      // Across nodes the source's rail peer in this node forwards its rows and raises the flag.
      const int writer = g.in_own_node(source) ? source : g.rail_peer_here(source);
      ok = wait_for_signal(c.transport, word, writer, ChunkFlagOf{chunk_epoch(step)}, &flag, c.timeout_ns, c.error,
                           kPhaseHtDispatch, g.rank, source);
    }
    __syncwarp();
    if (!__shfl_sync(0xffffffffu, ok, 0)) return false;
    flag = __shfl_sync(0xffffffffu, flag, 0);
    const int base = c.handle.recv_base[source], first_slot = c.handle.recv_slot[source];
    for (int j = chunk_flag_start(flag); j < chunk_flag_end(flag); ++j) {
      const uint64_t offset = ht_window_slot_offset(p.channel.data_offset, first_slot, j, g.dispatch_slot.bytes);
      const char* slot = static_cast<const char*>(c.transport.local(offset));
      if constexpr (kPacked) {
        copy_packed(p, slot, source, j);
      } else {
        copy_row(p, slot, base + j);
      }
    }
  }
  return true;
}

}  // namespace epc::kernels::ht_dispatch_recv
