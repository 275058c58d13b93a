// SPDX-License-Identifier: Apache-2.0
// Reading the rows and weights returned into this rank's combine slots [dest][row]
// (ht_message.hpp), shared by the receivers and, across nodes, the reducers; with
// EPC_WEIGHTING_HOME, per-entry slots [dest][row * entry_slots + k]. A row whose slot would
// be this rank's own ([rank][row]) was never copied: it is the caller's x.
#pragma once

#include "kernels/ht/ht_packed_rows.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ht_params.hpp"

namespace epc::kernels {

// Slot `index` of stream `dest`, whose streams hold `per_stream` slots.
__device__ __forceinline__ const char* returned_slot(const HtCombineParams& p, int dest, int index, int per_stream) {
  const HtGeometry& g = p.common.geo;
  return static_cast<const char*>(
      p.common.transport.local(ht_slot_offset(p.channel.data_offset, dest, index, per_stream, g.combine_slot.bytes)));
}

__device__ __forceinline__ const char* returned_slot(const HtCombineParams& p, int dest, int row) {
  return returned_slot(p, dest, row, p.common.geo.max_tokens);
}

// EPC_WEIGHTING_HOME: entry k of the token at [dest][row].
__device__ __forceinline__ const char* returned_entry_slot(const HtCombineParams& p, int dest, int row, int k) {
  return returned_slot(p, dest, row * p.entry_slots + k, p.common.geo.max_tokens * p.entry_slots);
}

// The bf16 row at [dest][row]: rows this rank returned for its own tokens, or for tokens of a
// source it reduces for (whose rows start at recv_base[source]), are read in place.
__device__ __forceinline__ const int4* returned_row(const HtCombineParams& p, int source, int dest, int row) {
  const HtGeometry& g = p.common.geo;
  if (dest == g.rank) {
    return reinterpret_cast<const int4*>(p.x + static_cast<size_t>(p.common.handle.recv_base[source] + row) * g.hidden);
  }
  return reinterpret_cast<const int4*>(returned_slot(p, dest, row));
}

// EPC_WEIGHTING_HOME: the bf16 row of entry k of this rank's token at [dest][row]; the rows
// this rank hosts are read in place, at the entry's own row of x.
__device__ __forceinline__ const int4* returned_entry_row(const HtCombineParams& p, int dest, int row, int k) {
  const HtGeometry& g = p.common.geo;
  if (dest == g.rank) {
    const int entry_row = p.common.handle.entry_rows[packed_entry_index(g, g.rank, row, k)];
    return reinterpret_cast<const int4*>(p.x + static_cast<size_t>(entry_row) * g.hidden);
  }
  return reinterpret_cast<const int4*>(returned_entry_slot(p, dest, row, k));
}

// The backward weight of entry k at [dest][row], read in place like returned_row (where dest
// is this rank, `row` is the token's slot index in source's stream: for the packed kinds the
// weight is then the one at entry k's own row of the zones).
template <HtCombineKind kKind>
__device__ __forceinline__ float returned_weight(const HtCombineParams& p, int source, int dest, int row, int k) {
  const HtGeometry& g = p.common.geo;
  if (kKind != HtCombineKind::kFlat && dest == g.rank) {  // the weight at entry k's own row
    const int entry_row = p.common.handle.entry_rows[packed_entry_index(g, source, row, k)];
    return entry_row >= 0 ? p.weights[entry_row] : 0.0f;
  }
  if (dest == g.rank) return p.weights[static_cast<size_t>(p.common.handle.recv_base[source] + row) * g.topk + k];
  if (kKind == HtCombineKind::kPackedHome) {  // the entry's own slot carries its weight first
    return __ldcg(reinterpret_cast<const float*>(returned_entry_slot(p, dest, row, k) + g.combine_slot.weights_offset));
  }
  return __ldcg(reinterpret_cast<const float*>(returned_slot(p, dest, row) + g.combine_slot.weights_offset) + k);
}

}  // namespace epc::kernels
