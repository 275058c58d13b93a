// SPDX-License-Identifier: Apache-2.0
// What the planner produces: the byte layout of one rank's symmetric window (regions,
// double-buffer slots, staging, signal areas) and the device resources a group needs, plus
// the small layout rules both the planner and its users (group creation, handles, the GIN
// signal plan) read offsets from. Plain data; core/planner.hpp computes it, and
// kernels/wire/ holds the byte formats inside each region.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/gin_signal_map.hpp"
#include "kernels/wire/ht_ring.hpp"
#include "kernels/wire/limits.hpp"
#include "kernels/wire/staging_map.hpp"

namespace epc {

struct Region {
  EpcRegionKind kind = 0;
  uint32_t slot = EPC_SLOT_NONE;
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string name;
};

// Inside the control region.
struct ControlLayout {
  uint64_t barrier_inbox_offset = 0;  // [nranks] uint64, from region start
};

struct Plan {
  EpcMode mode = EPC_MODE_LOW_LATENCY;
  uint32_t num_slots = 0;
  uint64_t symmetric_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint32_t num_sms = 0;
  uint32_t warps_per_block = 0;
  // Barriers are epcomm's own (in the control region) because every wait must time out;
  // NCCL's LSA barriers spin without a bound, so none are requested.
  uint32_t lsa_barriers = 0;
  // GIN resources, only when the ranks span several LSA teams: one context (NCCL 2.28.9
  // treats the count as a hint and may give more) and one signal per window word a rank of
  // another node writes (gin_signal_map, core/gin_signal_plan.hpp).
  uint32_t gin_contexts = 0;
  uint32_t gin_signals = 0;
  kernels::GinSignalMap gin_signal_map{};
  uint32_t message_bytes = 0;
  uint64_t handle_bytes = 0;   // device memory of one handle with the default configuration (layout)
  uint64_t recv_capacity = 0;  // after defaults
  uint32_t max_token_bytes = 0;
  uint32_t max_pending_steps = 0;
  ControlLayout control;
  // Where each rank stages what it sends to ranks of other nodes (the net_staging region's
  // layout, core/staging_plan.hpp); count 0 and offset 0 when every rank is in one node.
  kernels::StagingMap staging_map{};
  // High-throughput dispatch and combine over the node's credit rings, where the environment
  // forces them (core/ht/ht_rings.hpp), at the front of dispatch_recv and combine_recv;
  // capacity 0 otherwise.
  kernels::HtRingArea ht_dispatch_rings{};
  kernels::HtRingArea ht_combine_rings{};
  // High-throughput steps run in parts of this many tokens per rank (core/ht/ht_parts.hpp):
  // max_tokens_per_rank where they run whole, 0 in low-latency plans.
  uint32_t ht_part_tokens = 0;
  // Low-latency combine: the most tokens a rank may have in a step to take its partials back
  // as line records, and each combine slot's line records per source
  // (kernels/wire/ll_message.hpp; ll_line_tokens below); 0 in high-throughput plans. Where
  // the messages are small, dispatch steps of up to this many tokens (fewer for larger
  // messages, kernels::ll_dispatch_line_steps) move as line records, and each dispatch slot
  // holds those too.
  uint32_t ll_line_tokens = 0;
  std::vector<Region> regions;

  // The region of `kind` in `slot` (EPC_SLOT_NONE for unslotted); throws if absent.
  const Region& region(EpcRegionKind kind, uint32_t slot = EPC_SLOT_NONE) const;
};

constexpr uint64_t kRegionAlignment = 256;
constexpr uint64_t kWindowAlignment = 4096;  // NCCL_WIN_REQUIRED_ALIGNMENT
// No window is planned beyond this (far beyond any GPU's memory; keeps every offset sum
// inside 64 bits).
constexpr uint64_t kMaxWindowBytes = uint64_t{1} << 52;

// (local expert, position, weight) entries a low-latency message header holds, and the header's bytes.
uint32_t ll_message_entries(const GroupConfig& config);
uint32_t ll_message_header_bytes(const GroupConfig& config);
// Rows a low-latency combine slot holds per (source, token): one partial (EPC_WEIGHTING_SENDER),
// or with EPC_GROUP_COMBINE_PER_ENTRY one per message entry, ll_message_entries
// (EPC_WEIGHTING_HOME; kernels/wire/ll_message.hpp ll_entry_row_offset).
uint32_t ll_combine_rows_per_token(const GroupConfig& config);
// Bytes of one (source, token) record of a low-latency combine slot, those rows of hidden * 2
// bytes: where the partials of SENDER and NONE lie apart (kernels/wire/ll_message.hpp
// ll_partial_offset; LlGeometry::combine_record_bytes).
uint64_t ll_combine_record_bytes(const GroupConfig& config);
// Line records per source in a low-latency combine slot: min(max_tokens_per_rank,
// kLlLineTokens), or EPCOMM_LL_LINE_TOKENS where set (0: none; the same on every rank, as
// the window's layout must be), on a one-node group whose combine returns one partial per
// message; 0 across nodes (a line's words would reach a peer as separate network writes) and
// with EPC_GROUP_COMBINE_PER_ENTRY.
uint32_t ll_line_tokens(const GroupConfig& config, int nodes);
// Bytes of the [nranks][local_experts] int32 entry-count table behind a dispatch_recv slot's
// messages.
uint64_t ll_count_table_bytes(const GroupConfig& config, int nranks);

// High-throughput: a layout slot holds [R] uint64 signals, [R] uint64 signals of round two
// (kernels/wire/ht_params.hpp, HtLayoutParams), then [R][ht_layout_words] uint32 words and
// [R][L] uint32 words of round two. Where round two's signals, the words and round two's
// words start; the slot's bytes. Where the acknowledgements start inside a signal region,
// and that region's size.
using kernels::kHtLayoutSlots;
uint64_t ht_layout_round2_signals(int nranks);
uint64_t ht_layout_words_offset(int nranks);
uint64_t ht_layout_round2_words_offset(int nranks, int local_experts);
uint64_t ht_layout_slot_bytes(int nranks, int local_experts);
uint64_t ht_acks_offset(const GroupConfig& config, int nranks);
uint64_t ht_signal_bytes(const GroupConfig& config, int nranks);

}  // namespace epc
