// SPDX-License-Identifier: Apache-2.0
#include "core/plan.hpp"

#include <algorithm>
#include <cstdint>

#include "core/env_count.hpp"
#include "core/error.hpp"
#include "kernels/wire/ht_capacity.hpp"
#include "kernels/wire/ht_message.hpp"
#include "kernels/wire/ll_message.hpp"

namespace epc {

const Region& Plan::region(EpcRegionKind kind, uint32_t slot) const {
  for (const Region& r : regions) {
    if (r.kind == kind && r.slot == slot) return r;
  }
  fail(EPC_ERR_INTERNAL, format("plan has no region of kind %u in slot %u", kind, slot));
}

uint32_t ll_message_entries(const GroupConfig& c) {
  // Every top-k entry may land on one rank: duplicate expert ids are allowed, so a token
  // can hold more entries on a rank than the rank has experts.
  return c.max_topk;
}

uint32_t ll_combine_rows_per_token(const GroupConfig& c) {
  return (c.flags & EPC_GROUP_COMBINE_PER_ENTRY) != 0 ? ll_message_entries(c) : 1;
}

// LlGeometry holds it in an int, as it holds row_bytes.
static_assert(uint64_t{limits::kMaxHidden} * 2 * limits::kMaxTopk <= uint64_t{INT32_MAX},
              "a low-latency combine record fits 32-bit geometry");

uint64_t ll_combine_record_bytes(const GroupConfig& c) {
  return kernels::ll_combine_record_bytes(static_cast<int>(ll_combine_rows_per_token(c)),
                                          static_cast<uint64_t>(c.hidden) * 2);
}

uint32_t ll_line_tokens(const GroupConfig& c, int nodes) {
  const uint32_t wanted =
      env_count("EPCOMM_LL_LINE_TOKENS", kernels::kLlLineTokens, static_cast<uint32_t>(kernels::kMaxLlTokens));
  if (nodes > 1 || ll_combine_rows_per_token(c) != 1) return 0;
  return std::min(wanted, c.max_tokens_per_rank);
}

uint64_t ll_count_table_bytes(const GroupConfig& c, int nranks) {
  return kernels::ll_count_table_bytes(nranks, static_cast<int>(c.local_experts(nranks)));
}

uint64_t ht_layout_round2_signals(int nranks) { return static_cast<uint64_t>(nranks) * sizeof(uint64_t); }

uint64_t ht_layout_words_offset(int nranks) {
  return kernels::ht_align16(2 * static_cast<uint64_t>(nranks) * sizeof(uint64_t));
}

uint64_t ht_layout_round2_words_offset(int nranks, int local_experts) {
  return ht_layout_words_offset(nranks) +
         static_cast<uint64_t>(nranks) * static_cast<uint64_t>(kernels::ht_layout_words(nranks, local_experts)) * 4;
}

uint64_t ht_layout_slot_bytes(int nranks, int local_experts) {
  return ht_layout_round2_words_offset(nranks, local_experts) +
         static_cast<uint64_t>(nranks) * static_cast<uint64_t>(local_experts) * 4;
}

uint64_t ht_acks_offset(const GroupConfig& c, int nranks) {
  return kernels::ht_chunk_flags_bytes(nranks, static_cast<int>(c.max_tokens_per_rank));
}

uint64_t ht_signal_bytes(const GroupConfig& c, int nranks) {
  return kernels::ht_ack_word(ht_acks_offset(c, nranks), nranks);
}

uint32_t ll_message_header_bytes(const GroupConfig& c) {
  return static_cast<uint32_t>(kernels::ll_message_header_bytes(ll_message_entries(c)));
}

}  // namespace epc
