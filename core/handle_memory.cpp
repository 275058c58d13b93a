// SPDX-License-Identifier: Apache-2.0
#include "core/handle_memory.hpp"

#include "core/ht/ht_parts.hpp"
#include "kernels/wire/ht_capacity.hpp"
#include "kernels/wire/ht_message.hpp"
#include "kernels/wire/ll_state.hpp"

namespace epc {

uint64_t LlHandleSizes::bytes() const {
  return (topk_idx + recv_tokens + msg_slot + msg_entries + msg_rows + counts + expert_entries + entry_positions +
          token_places + rank_tokens) *
             sizeof(int32_t) +
         msg_weights * sizeof(float) + steps * sizeof(uint64_t);
}

LlHandleSizes ll_handle_sizes(const GroupConfig& c, int nranks) {
  const size_t R = static_cast<size_t>(nranks);
  const size_t T = c.max_tokens_per_rank;
  const size_t K = c.max_topk;
  LlHandleSizes s;
  s.topk_idx = T * K;
  s.recv_tokens = 2 * R;  // the messages each source sent, then its tokens (step_wait.cuh)
  s.msg_slot = R * T;
  s.msg_entries = R * T;
  s.msg_rows = R * T * K;
  s.msg_weights = R * T * K;
  s.counts = c.local_experts(nranks);
  s.expert_entries = c.num_experts;
  s.entry_positions = T * K;
  s.token_places = T * R;
  s.rank_tokens = R;
  s.steps = kernels::kLlStepRecords;
  return s;
}

uint64_t HtHandleSizes::bytes() const {
  return (topk_idx + token_row + chunk_start + entry_counts + recv_count + recv_base + send_slot + recv_slot +
          source_tokens + expert_counts + forwarded_rows + forwarded_topk + forward_slot + ring_tokens) *
             sizeof(int32_t) +
         sizeof(kernels::HtOverflowState);
}

HtHandleSizes ht_handle_sizes(const GroupConfig& c, const Topology& t, bool rings) {
  const size_t R = static_cast<size_t>(t.nranks);
  const size_t T = c.max_tokens_per_rank;
  const size_t K = c.max_topk;
  const size_t chunks = static_cast<size_t>(kernels::ht_chunks(static_cast<int>(T)));
  const size_t nodes = static_cast<size_t>(t.nodes());
  HtHandleSizes s;
  s.topk_idx = T * K;
  s.token_row = T * R;
  s.chunk_start = (chunks + 1) * R;
  s.entry_counts = c.num_experts;
  s.recv_count = R;
  s.recv_base = R + 1;
  s.send_slot = R;
  s.recv_slot = R;
  s.source_tokens = R;
  s.expert_counts = c.local_experts(t.nranks);
  s.forwarded_rows = nodes > 1 ? nodes * T * static_cast<size_t>(t.node_size) : 0;
  s.forwarded_topk = nodes > 1 ? nodes * T * K : 0;
  s.forward_slot = nodes > 1 ? nodes * static_cast<size_t>(t.node_size) : 0;
  s.ring_tokens = rings ? c.recv_capacity_for(t.nranks) : 0;
  return s;
}

uint64_t ht_handle_bytes(const GroupConfig& c, const Topology& t, uint32_t part_tokens, bool rings) {
  const GroupConfig part = ht_part_config(c, part_tokens);
  const HtHandleSizes whole = ht_handle_sizes(c, t, rings), each = ht_handle_sizes(part, t, rings);
  const uint64_t parts = ht_parts(c, part.max_tokens_per_rank);
  return whole.topk_idx * sizeof(int32_t) + parts * (each.bytes() - each.topk_idx * sizeof(int32_t));
}

}  // namespace epc
