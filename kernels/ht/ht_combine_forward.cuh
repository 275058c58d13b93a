// SPDX-License-Identifier: Apache-2.0
// High-throughput combine across nodes, the reducing part: this rank stands in, inside its
// node, for its rail peer s in every other node m. The ranks of this node returned the rows
// they received from s to this rank, into slots [their rail peer in m][j]
// (ht_combine_send.cuh); each warp takes (node, chunk of s's tokens) items and, for each
// token of the chunk that came to this node, waits for those rows, sums them in fp32 in
// ascending rank order and rounds once to bf16 (the reference model's partial; for
// EXPERT_PACKED handles the rows are the ranks' bf16 partials per (token, rank), this rank's
// own computed in place from its entries' rows), and puts
// that one row into s's slot [this rank][t] (with the backward weights of the entries
// hosted here); with EPC_WEIGHTING_HOME it forwards each entry's row hosted here unreduced into
// s's per-entry slot [this rank][t * entry_slots + k] instead (forward_entries). Then it
// raises s's flag [this rank][chunk]. Where the token's rows are on
// this node comes from the dispatch forwarders' record (HtHandleArrays::forwarded_rows).
// Like the senders, it first waits until every rank has acknowledged the previous combine.
#pragma once

#include "kernels/device/bf16_row_sum.cuh"
#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/row_copy.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/ht/ht_chunk_wait.cuh"
#include "kernels/ht/ht_combine_slots.cuh"
#include "kernels/ht/ht_packed_rows.cuh"
#include "kernels/ht/ht_rail_chunks.cuh"
#include "kernels/ht/ht_warp_roles.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ht_params.hpp"

namespace epc::kernels::ht_combine_forward {

// The slot index at which rank i of this node returned its row for a token of node m's
// source: its rail peer in m; this rank's own row is read in place (index = this rank).
__device__ __forceinline__ int slot_index(const HtGeometry& g, int m, int i) {
  const int own = g.rank % g.node_size;
  return i == own ? g.rank : m * g.node_size + i;
}

// The flags of the chunks holding the token's rows on this node (`rows`: node_size entries),
// lanes splitting the node's ranks. `*came` (every lane, valid when it returns true): the
// token has a row on this node; without one there is nothing to wait for.
__device__ __forceinline__ bool wait_for_rows(const HtCombineParams& p, uint64_t step, int m, const int32_t* rows,
                                              bool* came) {
  const HtGeometry& g = p.common.geo;
  bool any = false;
  auto row_of = [&](int i) {
    const int row = rows[i];
    any = any || row >= 0;
    return slot_index(g, m, i) == g.rank ? -1 : row;
  };
  auto stream_of = [&](int i) { return slot_index(g, m, i); };
  auto writer_of = [&](int i) { return g.node_of(g.rank) * g.node_size + i; };
  const bool ok = warp_wait_for_chunk_rows(p.common, p.channel.flags_offset, step, g.node_size, kPhaseHtCombine, row_of,
                                           stream_of, writer_of);
  *came = __any_sync(0xffffffffu, any);
  return ok;
}

// Token t's partial (and backward weights) into `slot`, s's slot [this rank][t] as buffer()
// gave it. kKind kPacked (EXPERT_PACKED): the node's ranks returned one bf16 partial per
// (token, rank), and this rank's own is the partial of the token's rows here, computed in
// place (PackedPartialTerm) as its combine senders compute them for peers.
template <HtCombineKind kKind>
__device__ __forceinline__ void reduce_token(const HtCombineParams& p, int m, int source, int t, const int32_t* rows,
                                             char* slot) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  auto term = [&](int i) -> const int4* {
    return rows[i] >= 0 ? returned_row(p, source, slot_index(g, m, i), rows[i]) : nullptr;
  };
  if constexpr (packed_partials(kKind)) {
    const int own = g.rank % g.node_size;
    warp_sum_bf16_rows(g.node_size, term, g.hidden / kBf16PerVector, slot, SumOutput::kBf16,
                       PackedPartialTerm(p, rows[own] >= 0 ? own : -1, source, rows[own]));
  } else {
    warp_sum_bf16_rows(g.node_size, term, g.hidden / kBf16PerVector, slot, SumOutput::kBf16);
  }
  const int k = lane_id();
  if (p.weights == nullptr || k >= g.topk) return;
  const int expert = c.handle.forwarded_topk[(static_cast<size_t>(m) * g.max_tokens + t) * g.topk + k];
  const int owner = expert >= 0 ? expert / g.local_experts : -1;
  float weight = 0.0f;  // entries hosted on other nodes come with those nodes' partials
  if (owner >= 0 && g.in_own_node(owner)) {
    const int i = owner % g.node_size;
    weight = returned_weight<kKind>(p, source, slot_index(g, m, i), rows[i], k);
  }
  reinterpret_cast<float*>(slot + g.combine_slot.weights_offset)[k] = weight;
}

// EPC_WEIGHTING_HOME: token t's entries hosted on this node, unreduced and unweighted, each
// from the per-entry slot its rank returned it to (this rank's own from x, at the entry's own
// row) into s's per-entry slot [this rank][t * entry_slots + k], with its backward weight first
// in the slot's weights where weights travel; each slot is put as soon as it is written.
__device__ __forceinline__ void forward_entries(const HtCombineParams& p, int m, int source, int t,
                                                const int32_t* rows) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int k = lane_id();
  const char* from = nullptr;
  float weight = 0.0f;
  if (k < g.topk) {
    const int expert = c.handle.forwarded_topk[(static_cast<size_t>(m) * g.max_tokens + t) * g.topk + k];
    const int owner = expert >= 0 ? expert / g.local_experts : -1;
    const int j = owner >= 0 && g.in_own_node(owner) ? rows[owner % g.node_size] : -1;
    const int index = j >= 0 ? slot_index(g, m, owner % g.node_size) : -1;
    if (index == g.rank) {
      const int entry_row = c.handle.entry_rows[packed_entry_index(g, source, j, k)];
      from = reinterpret_cast<const char*>(p.x + static_cast<size_t>(entry_row) * g.hidden);
      if (p.weights != nullptr) weight = p.weights[entry_row];
    } else if (index >= 0) {
      from = returned_entry_slot(p, index, j, k);
      if (p.weights != nullptr) weight = __ldcg(reinterpret_cast<const float*>(from + g.combine_slot.weights_offset));
    }
  }
  const int per_stream = g.max_tokens * p.entry_slots;
  auto offset_of = [&](int entry) {
    return ht_slot_offset(p.channel.data_offset, g.rank, t * p.entry_slots + entry, per_stream, g.combine_slot.bytes);
  };
  char* to = from != nullptr ? static_cast<char*>(c.transport.buffer(offset_of(k), source)) : nullptr;
  const unsigned entries = __ballot_sync(0xffffffffu, from != nullptr);
  for (unsigned rest = entries; rest != 0; rest &= rest - 1) {
    const int e = __ffs(rest) - 1;
    warp_copy_row_segmented<RowLoad::kCoherent>(
        reinterpret_cast<int4*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(to), e)),
        reinterpret_cast<const int4*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(from), e)),
        g.hidden * 2 / 16);
  }
  if (to != nullptr && p.weights != nullptr) reinterpret_cast<float*>(to + g.combine_slot.weights_offset)[0] = weight;
  __syncwarp();  // the warp commits together what its lanes wrote
  for (unsigned rest = entries; rest != 0; rest &= rest - 1) {
    c.transport.commit(offset_of(__ffs(rest) - 1), g.combine_slot.bytes, source, lane_id(), kWarpSize);
  }
}

// Returns false when a wait failed (recorded in the group's error). kKind: FLAT, EXPERT_PACKED
// with one partial per (token, rank), or EXPERT_PACKED with one row per (token, entry)
// (EPC_WEIGHTING_HOME: forwarded, not reduced).
template <HtCombineKind kKind>
__device__ __forceinline__ bool run(const HtCombineParams& p, uint64_t step, const WarpRole& role) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  return for_each_rail_chunk(c, p.channel.acks_offset, step, kPhaseHtCombine, role, [&](int m, int chunk, int source) {
    const int first = chunk * kHtChunkTokens;
    const int end = min(c.handle.source_tokens[source], first + kHtChunkTokens);
    uint32_t came = 0;  // bit j: token first + j has rows on this node
    for (int t = first; t < end; ++t) {
      const int32_t* rows = c.handle.forwarded_rows + (static_cast<size_t>(m) * g.max_tokens + t) * g.node_size;
      bool here = false;
      if (!wait_for_rows(p, step, m, rows, &here)) return false;
      if (!here) continue;
      came |= 1u << (t - first);
      if constexpr (kKind == HtCombineKind::kPackedHome) {
        forward_entries(p, m, source, t, rows);  // puts its slots itself
      } else {
        const uint64_t at = ht_slot_offset(p.channel.data_offset, g.rank, t, g.max_tokens, g.combine_slot.bytes);
        reduce_token<kKind>(p, m, source, t, rows, static_cast<char*>(c.transport.buffer(at, source)));
      }
    }
    if (came == 0) return true;  // the source waits only for tokens that came here
    __syncwarp();                // the warp commits together what its lanes wrote
    for (int t = first; t < end && kKind != HtCombineKind::kPackedHome; ++t) {
      if (((came >> (t - first)) & 1u) == 0) continue;
      c.transport.commit(ht_slot_offset(p.channel.data_offset, g.rank, t, g.max_tokens, g.combine_slot.bytes),
                         g.combine_slot.bytes, source, lane_id(), kWarpSize);
    }
    __threadfence_system();
    __syncwarp();
    if (lane_id() == 0) {
      const uint64_t flag = ht_chunk_flag_word(p.channel.flags_offset, g.rank, chunk, g.max_tokens);
      c.transport.signal(flag, source, chunk_flag(step, static_cast<uint32_t>(first), static_cast<uint32_t>(end)));
    }
    return true;
  });
}

}  // namespace epc::kernels::ht_combine_forward
