// SPDX-License-Identifier: Apache-2.0
#include "core/staging_plan.hpp"

#include "core/error.hpp"
#include "kernels/wire/ht_capacity.hpp"
#include "kernels/wire/ht_message.hpp"
#include "kernels/wire/ll_message.hpp"

namespace epc {

namespace {

using kernels::RowOf;
using kernels::Staged;
using kernels::StagedFor;

class StagingBuilder {
 public:
  explicit StagingBuilder(kernels::StagingMap& map) : map_(map) {}

  // Rows of `row_bytes`, `row_stride` apart from `offset`, one per writer rank (or node),
  // staged whole, per destination.
  void add(Staged name, uint32_t slot, uint64_t offset, uint64_t row_stride, uint64_t row_bytes, RowOf row_of,
           StagedFor staged_for) {
    if (map_.count == static_cast<uint32_t>(kernels::kMaxStagedArrays) ||
        staged_for == StagedFor::kOnceForRemoteRanks) {
      fail(EPC_ERR_INTERNAL, "more staged arrays than kernels::kMaxStagedArrays, or a whole row staged once");
    }
    map_.arrays[map_.count] = kernels::StagedArray{offset, row_stride, row_bytes, 0, name, slot, row_of, staged_for};
    place(map_.arrays[map_.count++], row_bytes);
  }
  // Rows of records of `record_stride` bytes, of which bytes [part_begin, part_begin +
  // part_bytes) of each are staged (packed; 16-byte multiples), per destination or once.
  void add_parts(Staged name, uint32_t slot, uint64_t offset, uint64_t row_stride, uint64_t row_bytes,
                 uint64_t record_stride, uint64_t part_begin, uint64_t part_bytes, StagedFor staged_for) {
    const uint64_t align = kernels::kStagedRowAlignment;
    if (map_.part_count == static_cast<uint32_t>(kernels::kMaxStagedParts) || row_bytes % record_stride != 0 ||
        part_begin + part_bytes > record_stride || record_stride % align != 0 || part_bytes % align != 0 ||
        part_bytes == 0 || row_bytes >= kernels::kMaxStagedRecordRowBytes) {
      fail(EPC_ERR_INTERNAL, "a staged array's parts do not tile its records");
    }
    kernels::StagedParts& p = map_.parts[map_.part_count++];
    p = kernels::StagedParts{{offset, row_stride, row_bytes, 0, name, slot, RowOf::kRank, staged_for},
                             record_stride,
                             part_begin,
                             part_bytes};
    place(p.rows, p.staged_bytes());
  }
  // Shorthands: rows by writer rank, bound for every rank of another node; uint64 words.
  void to_every_rank(Staged name, uint32_t slot, uint64_t offset, uint64_t row_bytes) {
    add(name, slot, offset, row_bytes, row_bytes, RowOf::kRank, StagedFor::kEveryRemoteRank);
  }
  void words_to_every_rank(Staged name, uint32_t slot, uint64_t offset) {
    to_every_rank(name, slot, offset, sizeof(uint64_t));
  }

 private:
  kernels::StagingMap& map_;
  uint64_t rank_cursor_ = 0;
  uint64_t rail_cursor_ = 0;
  uint64_t shared_cursor_ = 0;

  // Places `bytes` of `a` at its block's cursor, 16-byte aligned.
  void place(kernels::StagedArray& a, uint64_t bytes) {
    uint64_t& cursor = a.staged_for == StagedFor::kRemoteRailPeer       ? rail_cursor_
                       : a.staged_for == StagedFor::kOnceForRemoteRanks ? shared_cursor_
                                                                        : rank_cursor_;
    a.staged = cursor;
    cursor = kernels::staged_align(cursor + bytes);
    map_.rank_block_bytes = rank_cursor_;
    map_.rail_block_bytes = rail_cursor_;
    map_.shared_block_bytes = shared_cursor_;
  }
};

// What the low-latency kernels write into a peer: per slot, the messages and entry counts of
// dispatch (kernels/ll/ll_dispatch_send.cuh), combine's partial rows
// (ll_combine_parts.cuh), and in each direction's signal region the writer's step signal and
// credit (kernels/device/step_signal.cuh, ll_slot_credit.cuh). A message's header names the
// token's entries on its destination, so it is staged per destination; its payload (the
// token's row, or its e4m3 bytes and scales) is the same bytes for every destination, so it
// is staged once per (slot, token) and put from there to each rank of another node hosting
// one of the token's entries. Partials are one row per (destination, token): per
// destination. With EPC_GROUP_COMBINE_PER_ENTRY (EPC_WEIGHTING_HOME) the combine row is
// the writer's [T][max_entries] entry rows (ll_combine_home.cuh), staged whole per
// destination like the partials, so a message's rows stay contiguous in staging and its
// sender looks them up once.
void plan_low_latency(const GroupConfig& c, const Topology& t, const Plan& plan, StagingBuilder& b) {
  const int T = static_cast<int>(c.max_tokens_per_rank);
  const int L = static_cast<int>(c.local_experts(t.nranks));
  const uint64_t messages = kernels::ll_record_offset(1, 0, T, plan.message_bytes);
  const uint64_t header = ll_message_header_bytes(c);
  const uint64_t combine_row = kernels::ll_combine_slot_bytes(1, T, static_cast<int>(ll_combine_rows_per_token(c)),
                                                              static_cast<uint64_t>(c.hidden) * 2);
  for (uint32_t s = 0; s < plan.num_slots; ++s) {
    const uint64_t recv = plan.region(EPC_REGION_DISPATCH_RECV, s).offset;
    b.add_parts(Staged::kLlMessageHeaders, s, recv, messages, messages, plan.message_bytes, 0, header,
                StagedFor::kEveryRemoteRank);
    b.add_parts(Staged::kLlMessagePayloads, s, recv, messages, messages, plan.message_bytes, header,
                plan.message_bytes - header, StagedFor::kOnceForRemoteRanks);
    b.to_every_rank(Staged::kLlCounts, s, recv + kernels::ll_count_table_offset(t.nranks, T, plan.message_bytes),
                    kernels::ll_count_offset(1, 0, L));
    b.to_every_rank(Staged::kLlDispatchSignals, s, plan.region(EPC_REGION_DISPATCH_SIGNAL, s).offset,
                    kernels::ll_signal_row_bytes());
    b.to_every_rank(Staged::kLlCombineRows, s, plan.region(EPC_REGION_COMBINE_RECV, s).offset, combine_row);
    b.to_every_rank(Staged::kLlCombineSignals, s, plan.region(EPC_REGION_COMBINE_SIGNAL, s).offset,
                    kernels::ll_signal_row_bytes());
  }
}

// What the high-throughput kernels write into a peer of another node: to every rank, the
// layout words and signals (kernels/ht/ht_layout.cu, ht_layout_capacity.cuh) and both
// directions' acknowledgements (ht_step_kernel.cuh); to its rail peer in each other node
// only, the rail slots and flags of dispatch (ht_dispatch_rail.cuh) and combine's partials
// and their flags (ht_combine_forward.cuh). Everything else stays inside the node.
void plan_high_throughput(const GroupConfig& c, const Topology& t, const Plan& plan, StagingBuilder& b) {
  const int R = t.nranks, T = static_cast<int>(c.max_tokens_per_rank);
  const int L = static_cast<int>(c.local_experts(t.nranks));
  for (uint32_t s = 0; s < kHtLayoutSlots; ++s) {
    const uint64_t slot = plan.region(EPC_REGION_LAYOUT, s).offset;
    b.words_to_every_rank(Staged::kHtLayoutSignals, s, slot);
    b.words_to_every_rank(Staged::kHtLayoutRound2Signals, s, slot + ht_layout_round2_signals(R));
    b.to_every_rank(Staged::kHtLayoutWords, s, slot + ht_layout_words_offset(R),
                    static_cast<uint64_t>(kernels::ht_layout_words(R, L)) * sizeof(int32_t));
    b.to_every_rank(Staged::kHtLayoutRound2Words, s, slot + ht_layout_round2_words_offset(R, L),
                    static_cast<uint64_t>(L) * sizeof(int32_t));
  }
  const uint64_t acks = ht_acks_offset(c, R);
  b.words_to_every_rank(Staged::kHtDispatchAcks, kernels::kNoStagingSlot,
                        plan.region(EPC_REGION_DISPATCH_SIGNAL).offset + acks);
  b.words_to_every_rank(Staged::kHtCombineAcks, kernels::kNoStagingSlot,
                        plan.region(EPC_REGION_COMBINE_SIGNAL).offset + acks);

  const uint32_t element = c.dtype == EPC_DTYPE_FP8_E4M3 ? 1 : 2;
  const kernels::HtDispatchSlot dispatch = kernels::ht_dispatch_slot(c.hidden, element, c.max_topk, c.token_bytes);
  const kernels::HtRailSlot rail = kernels::ht_rail_slot(dispatch, static_cast<uint32_t>(t.node_size), c.max_topk);
  const kernels::HtCombineSlot combine = kernels::ht_combine_slot(c.hidden, c.max_topk);
  const uint64_t rail_row = kernels::ht_slot_offset(0, 1, 0, T, rail.bytes);
  const uint64_t partial_row = kernels::ht_slot_offset(0, 1, 0, T, combine.bytes);
  const uint64_t flag_row = kernels::ht_chunk_flags_bytes(1, T);
  b.add(Staged::kHtRailRows, kernels::kNoStagingSlot, plan.region(EPC_REGION_RAIL_RECV).offset, rail_row, rail_row,
        RowOf::kNode, StagedFor::kRemoteRailPeer);
  b.add(Staged::kHtRailFlags, kernels::kNoStagingSlot, plan.region(EPC_REGION_RAIL_SIGNAL).offset, flag_row, flag_row,
        RowOf::kNode, StagedFor::kRemoteRailPeer);
  b.add(Staged::kHtCombinePartials, kernels::kNoStagingSlot, plan.region(EPC_REGION_COMBINE_RECV).offset, partial_row,
        partial_row, RowOf::kRank, StagedFor::kRemoteRailPeer);
  b.add(Staged::kHtCombineFlags, kernels::kNoStagingSlot, plan.region(EPC_REGION_COMBINE_SIGNAL).offset, flag_row,
        flag_row, RowOf::kRank, StagedFor::kRemoteRailPeer);
  // EPC_WEIGHTING_HOME: each entry's row, forwarded unreduced (ht_combine_forward.cuh).
  const int per_token = static_cast<int>(c.combine_slots_per_token());
  if (per_token > 1) {
    const uint64_t entry_row = kernels::ht_slot_offset(0, 1, 0, T * per_token, combine.bytes);
    b.add(Staged::kHtCombineEntries, kernels::kNoStagingSlot, plan.region(EPC_REGION_COMBINE_RECV).offset, entry_row,
          entry_row, RowOf::kRank, StagedFor::kRemoteRailPeer);
  }
}

}  // namespace

kernels::StagingMap plan_staging(const GroupConfig& c, const Topology& t, const Plan& plan) {
  kernels::StagingMap map{};
  if (t.nodes() < 2) return map;
  map.remote_ranks = static_cast<uint32_t>(t.remote_ranks());
  map.remote_nodes = static_cast<uint32_t>(t.nodes() - 1);
  map.node_size = static_cast<uint32_t>(t.node_size);
  StagingBuilder b(map);
  // The group barrier: every rank signals its epoch into its word of every rank's inbox.
  b.words_to_every_rank(Staged::kBarrierInbox, kernels::kNoStagingSlot,
                        plan.region(EPC_REGION_CONTROL).offset + plan.control.barrier_inbox_offset);
  if (c.mode == EPC_MODE_LOW_LATENCY) {
    plan_low_latency(c, t, plan, b);
  } else {
    plan_high_throughput(c, t, plan, b);
  }
  // Each block is at most one rank's window; the blocks stay inside kMaxWindowBytes.
  const uint64_t blocks = uint64_t{map.remote_ranks} + map.remote_nodes + (map.shared_block_bytes > 0 ? 1 : 0);
  uint64_t block = map.rank_block_bytes > map.rail_block_bytes ? map.rank_block_bytes : map.rail_block_bytes;
  block = block > map.shared_block_bytes ? block : map.shared_block_bytes;
  if (block > kMaxWindowBytes / blocks) {
    fail_argument(
        format("the window would need more than %llu bytes per rank: each of the %d ranks outside the "
               "node needs %llu bytes of staging; use fewer tokens, a smaller hidden or larger nodes",
               static_cast<unsigned long long>(kMaxWindowBytes), t.remote_ranks(),
               static_cast<unsigned long long>(map.rank_block_bytes)));
  }
  return map;
}

}  // namespace epc
