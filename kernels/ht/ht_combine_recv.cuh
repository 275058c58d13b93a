// SPDX-License-Identifier: Apache-2.0
// High-throughput combine, receiving part. Each warp takes tokens of this rank: it waits for
// the flags of the chunks holding the token's returned rows (the layout says which row of
// each rank's stream the token is), then sums them in fp32, rounding once to bf16, in the
// order of the reference model: ranks ascending, where a rank of this node adds the row it
// returned and, across nodes, another node adds once, at its rank on this rank's rail, the
// partial sum of its rows that rank returned at slot [it][t] (ht_combine_forward.cuh). For
// the backward pass, entry k's weight comes from the rank hosting entry k's expert (through
// its node's partial when that is another node). With EPC_WEIGHTING_HOME the terms are the
// token's entries instead, k ascending, each row weighted by the token's home weight (the
// chunk flags waited for are the same: a rank's flag covers all entries of its tokens).
// Rows this rank returned to itself are never copied: they are read from the caller's x.
#pragma once

#include "kernels/device/bf16_row_sum.cuh"
#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/ht/ht_chunk_wait.cuh"
#include "kernels/ht/ht_combine_slots.cuh"
#include "kernels/ht/ht_packed_rows.cuh"
#include "kernels/ht/ht_warp_roles.cuh"
#include "kernels/wire/ht_params.hpp"

namespace epc::kernels::ht_combine_recv {

// What rank d contributes to token t (whose rows on every rank are `rows`): the slot row
// index of the term in d's stream into this rank, or -1 for none. A rank of this node: the
// row it returned; across nodes, this rank's rail peer in another node: token t's partial.
__device__ __forceinline__ int term_row(const HtGeometry& g, const int32_t* rows, int t, int d) {
  if (g.in_own_node(d)) return rows[d];
  return g.is_rail_peer(d) && g.node_receives(rows, g.node_of(d)) ? t : -1;
}

// The flags of the chunks holding token t's terms, lanes splitting the ranks.
__device__ __forceinline__ bool wait_for_rows(const HtCombineParams& p, uint64_t step, int t) {
  const HtGeometry& g = p.common.geo;
  const int32_t* rows = p.common.handle.token_row + static_cast<size_t>(t) * g.nranks;
  // No term, or this rank's own row (the caller's x): nothing to wait for.
  auto row_of = [&](int d) { return d == g.rank ? -1 : term_row(g, rows, t, d); };
  auto rank_d = [](int d) { return d; };
  return warp_wait_for_chunk_rows(p.common, p.channel.flags_offset, step, g.nranks, kPhaseHtCombine, row_of, rank_d,
                                  rank_d);
}

// EPC_WEIGHTING_HOME: token t's entries' rows, weighted by its home weights, in top-k order.
// An entry hosted on another node came through this rank's rail peer there, at slot
// [peer][t * entry_slots + k] (ht_combine_forward.cuh).
__device__ __forceinline__ void sum_entries(const HtCombineParams& p, int t, const int32_t* rows, void* out) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  auto term = [&](int k) -> const int4* {
    const int expert = c.handle.topk_idx[t * g.topk + k];
    if (expert < 0) return nullptr;
    const int dest = expert / g.local_experts;
    const int row = rows[dest];  // -1: the token's rows were dropped there (capacity)
    if (row < 0) return nullptr;
    return g.in_own_node(dest) ? returned_entry_row(p, dest, row, k)
                               : returned_entry_row(p, g.rail_peer(g.node_of(dest)), t, k);
  };
  auto weight = [&](int k) { return __ldg(p.home_weights + static_cast<size_t>(t) * g.topk + k); };
  warp_sum_bf16_rows(g.topk, term, g.hidden / kBf16PerVector, out, p.out_type, NoComputedTerm{},
                     TermWeights<decltype(weight)>{weight});
}

template <HtCombineKind kKind>
__device__ __forceinline__ void reduce_token(const HtCombineParams& p, int t) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int32_t* rows = c.handle.token_row + static_cast<size_t>(t) * g.nranks;
  void* out = static_cast<char*>(p.out) + static_cast<size_t>(t) * g.hidden * sum_output_bytes(p.out_type);
  if constexpr (kKind == HtCombineKind::kPackedHome) {
    sum_entries(p, t, rows, out);
  } else if constexpr (packed_partials(kKind)) {
    // This rank's own term is the partial of the token's rows here, computed in place, or
    // (kPackedLone) from its one row: that row as a plain term unweighted, its products with
    // the weight, rounded, weighted.
    const PackedPartialTerm own(p, rows[g.rank] >= 0 ? g.rank : -1, g.rank, rows[g.rank]);
    const PackedLoneRow lone = kKind == HtCombineKind::kPackedLone ? own.lone_row() : PackedLoneRow{nullptr, 0.0f};
    auto term = [&](int d) -> const int4* {
      const int row = term_row(g, rows, t, d);
      if (row < 0) return nullptr;
      if (d != g.rank) return returned_row(p, g.rank, d, row);
      return lone.row != nullptr ? lone.row : reinterpret_cast<const int4*>(p.x);  // x: a computed term's
    };
    const int vectors = g.hidden / kBf16PerVector;
    if (lone.row != nullptr && !p.weighted) {
      warp_sum_bf16_rows(g.nranks, term, vectors, out, p.out_type);
    } else if (lone.row != nullptr) {
      warp_sum_bf16_rows(g.nranks, term, vectors, out, p.out_type, LoneWeightedTerm{own.index(), lone.weight});
    } else {
      warp_sum_bf16_rows(g.nranks, term, vectors, out, p.out_type, own);
    }
  } else {
    auto term = [&](int d) -> const int4* {
      const int row = term_row(g, rows, t, d);
      return row >= 0 ? returned_row(p, g.rank, d, row) : nullptr;
    };
    warp_sum_bf16_rows(g.nranks, term, g.hidden / kBf16PerVector, out, p.out_type);
  }
  const int k = lane_id();
  if (p.out_weights != nullptr && k < g.topk) {
    const int expert = c.handle.topk_idx[t * g.topk + k];
    float weight = 0.0f;
    if (expert >= 0) {
      const int owner = expert / g.local_experts;
      const int dest = g.in_own_node(owner) ? owner : g.rail_peer(g.node_of(owner));
      const int row = term_row(g, rows, t, dest);  // -1: the row was dropped there (capacity)
      if (row >= 0) weight = returned_weight<kKind>(p, g.rank, dest, row, k);
    }
    p.out_weights[static_cast<size_t>(t) * g.topk + k] = weight;
  }
}

// Returns false when a wait failed (recorded in the group's error). Tokens, not chunks, are
// dealt to warps: a token's reduction is the slow part, so a warp holding a whole chunk at
// the end would stretch the tail.
template <HtCombineKind kKind>
__device__ __forceinline__ bool run(const HtCombineParams& p, uint64_t step, const WarpRole& role) {
  for (int t = role.index; t < p.common.num_tokens; t += role.count) {
    if (!wait_for_rows(p, step, t)) return false;
    reduce_token<kKind>(p, t);
  }
  return true;
}

}  // namespace epc::kernels::ht_combine_recv
