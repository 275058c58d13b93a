// SPDX-License-Identifier: Apache-2.0
// How many elements each device array of a handle holds: one statement shared by the
// handles, which allocate them (core/ll/ll_handle.cpp, core/ht/ht_handle.cpp), and the
// planner, which reports their sum (EpcPlan.handle_bytes). That sum is the default layout's
// only (LL EXPERT_PADDED, HT FLAT): the plan is per group and the layout per handle, so an HT
// EXPERT_PACKED handle's extra arrays (HtHandle::allocate_packed) are not in it, as the
// header's comment on handle_bytes says.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/config.hpp"
#include "core/topology.hpp"

namespace epc {

// Low latency: the routing and what connects a dispatch to its combine.
struct LlHandleSizes {
  size_t topk_idx;         // int32 [T, max_topk]
  size_t recv_tokens;      // int32 [2R]: messages from each source, then its tokens
  size_t msg_slot;         // int32 [R * T]
  size_t msg_entries;      // int32 [R, T]
  size_t msg_rows;         // int32 [R, T, max_topk]
  size_t msg_weights;      // float [R, T, max_topk]
  size_t counts;           // int32 [L]: the per-expert counts when the caller asks for none
  size_t expert_entries;   // int32 [num_experts]: the routing's entries per expert
  size_t entry_positions;  // int32 [T, K]: each entry's position among its expert's entries
  size_t token_places;     // int32 [T, R]: each token's place on every rank
  size_t rank_tokens;      // int32 [R]: the routing's tokens with an entry on each rank
  size_t steps;            // uint64 [kLlStepRecords]: the step of the last dispatch and combine
  uint64_t bytes() const;
};
LlHandleSizes ll_handle_sizes(const GroupConfig& config, int nranks);

// High throughput: the routing and its layout (kernels/wire/ht_params.hpp, HtHandleArrays).
struct HtHandleSizes {
  size_t topk_idx;         // int32 [T, max_topk]
  size_t token_row;        // int32 [T, R]
  size_t chunk_start;      // int32 [chunks + 1, R]
  size_t entry_counts;     // int32 [num_experts]
  size_t recv_count;       // int32 [R]
  size_t recv_base;        // int32 [R + 1]
  size_t send_slot;        // int32 [R]
  size_t recv_slot;        // int32 [R]
  size_t source_tokens;    // int32 [R]
  size_t expert_counts;    // int32 [L]
  size_t forwarded_rows;   // int32 [nodes, T, node size], with several nodes
  size_t forwarded_topk;   // int32 [nodes, T, max_topk], with several nodes
  size_t forward_slot;     // int32 [nodes, node size], with several nodes
  size_t ring_tokens;      // int32 [recv_capacity], with rings (core/ht/ht_rings.hpp)
  uint64_t bytes() const;  // with one kernels::HtOverflowState
};
HtHandleSizes ht_handle_sizes(const GroupConfig& config, const Topology& topology, bool rings);
// The device memory of a handle whose steps run in parts of `part_tokens` tokens per rank
// (core/ht/ht_parts.hpp): the routing once, each part's layout arrays (ht_handle_sizes of
// ht_part_config) once per part.
uint64_t ht_handle_bytes(const GroupConfig& config, const Topology& topology, uint32_t part_tokens, bool rings);

}  // namespace epc
