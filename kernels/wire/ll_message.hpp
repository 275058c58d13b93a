// SPDX-License-Identifier: Apache-2.0
// The wire format of a low-latency dispatch message, shared by the planner (which sizes the
// receive slots) and the kernels (which write and read them).
//
// A source rank writes one message per (token, destination rank hosting one of its entries)
// into the destination's slot at record [source][index], the index being the token's place
// there (the source's tokens before it with an entry there), so a source's messages to a rank
// lie back to back and its step signal carries their count; its messages to itself keep one
// record per token, the index being the token (kernels/ll/ll_message_index.cuh). A message is
// a header naming the token's entries on that rank, then the payload (the 16-bit row, or e4m3
// bytes followed by one fp32 scale per 128 channels). Each entry
// carries its position among the source's entries for the same expert, counted in (token,
// top-k slot) order, so the receiver can place every message independently: the packed row
// is (entries of that expert from lower source ranks) + position. Behind the messages sits
// a small table [source][local expert] of those per-source entry counts.
//
// The token layouts (RANK_MAJOR, FLAT: one row per received token) place a message by its
// token instead: every header's `place` counts the source's tokens before this one that it
// sent the receiver, so a message's row is its place (RANK_MAJOR, in the source's zone) or
// the tokens of lower source ranks + place (FLAT), a source's token count being what its
// signal carries (this rank's own: its routing's count); each entry's `position` holds its
// top-k slot. Every rank's handle of one step has the same layout, so the sender knows which of
// the two it writes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/wire/limits.hpp"

namespace epc::kernels {

struct LlMessageHeader {
  int32_t place;    // token layouts: the source's tokens before this one sent to this
                    // receiver; EXPERT_PADDED: the source token
  int32_t entries;  // LlMessageEntry records that follow
};

struct LlMessageEntry {
  int32_t local_expert;
  int32_t position;  // EXPERT_PADDED: among the source's entries for this expert, in
                     // (token, slot) order; token layouts: the entry's top-k slot
  float weight;      // the entry's topk_weights value (0 where dispatch was given none)
};

constexpr size_t kLlMessageAlignment = 16;

// Named offsets inside a receive slot, which holds one record of `record_bytes` per (source
// rank, index), [nranks][max_tokens]: dispatch messages, or combine's partial rows (a
// message's partial at the message's record).
// Planner and kernels alike compute window addresses through these.
constexpr uint64_t ll_record_offset(int source, int token, int max_tokens, uint64_t record_bytes) {
  return (static_cast<uint64_t>(source) * max_tokens + token) * record_bytes;
}
// A combine slot holds one record per (source rank, token), [nranks][max_tokens], of
// `rows_per_token` bf16 rows: one partial row, or on groups with EPC_GROUP_COMBINE_PER_ENTRY
// max_entries rows, one per entry of the message (EPC_WEIGHTING_HOME). A record's bytes:
constexpr uint64_t ll_combine_record_bytes(int rows_per_token, uint64_t row_bytes) {
  return static_cast<uint64_t>(rows_per_token) * row_bytes;
}
// The partial (EPC_WEIGHTING_SENDER, NONE) of the message token `token` sent `source`: the
// first row of its record. On a per-entry group that is the record's entry row 0, inside the
// writer's [max_tokens][max_entries] rows, which the staging map stages whole per remote rank
// (kLlCombineRows); without the flag (one row per record) the [nranks][max_tokens] partials.
// Sender and receiver, host and device, place partials through this getter only.
constexpr uint64_t ll_partial_offset(int source, int token, int max_tokens, uint64_t record_bytes) {
  return ll_record_offset(source, token, max_tokens, record_bytes);
}
// With EPC_WEIGHTING_HOME, entry j of the message token `token` sent `source` (its j-th entry
// on that rank, in top-k order): row j of the record, whose row 0 is where a partial goes.
constexpr uint64_t ll_entry_row_offset(int source, int token, int entry, int max_tokens, int max_entries,
                                       uint64_t row_bytes) {
  return ll_partial_offset(source, token, max_tokens, ll_combine_record_bytes(max_entries, row_bytes)) +
         static_cast<uint64_t>(entry) * row_bytes;
}
// Bytes of a combine slot of `rows_per_token` rows (1, or max_entries per entry) per record.
constexpr uint64_t ll_combine_slot_bytes(int nranks, int max_tokens, int rows_per_token, uint64_t row_bytes) {
  return ll_record_offset(nranks, 0, max_tokens, ll_combine_record_bytes(rows_per_token, row_bytes));
}
// Behind a combine slot's records, on a one-node group, [nranks][line_tokens] line records:
// where every partial to a rank with at most line_tokens tokens in the step goes instead (its
// index is below its tokens), each 4 bytes of the row in an 8-byte word beside the step's
// epoch (kernels/device/line_words.cuh), so that rank sees it arrive without the sender's
// signal. A line record's bytes:
constexpr uint64_t ll_line_record_bytes(uint64_t row_bytes) { return 2 * row_bytes; }
// From the combine slot's start; `records_bytes` is the slot's records
// (ll_combine_slot_bytes).
constexpr uint64_t ll_line_partial_offset(uint64_t records_bytes, int source, int index, int line_tokens,
                                          uint64_t row_bytes) {
  return records_bytes + ll_record_offset(source, index, line_tokens, ll_line_record_bytes(row_bytes));
}
constexpr uint64_t ll_combine_line_bytes(int nranks, int line_tokens, uint64_t row_bytes) {
  return ll_record_offset(nranks, 0, line_tokens, ll_line_record_bytes(row_bytes));
}
// Behind a dispatch slot's messages, the [nranks][local_experts] int32 table of entries per
// source and local expert.
constexpr uint64_t ll_count_table_offset(int nranks, int max_tokens, uint64_t message_bytes) {
  return static_cast<uint64_t>(nranks) * max_tokens * message_bytes;
}
constexpr uint64_t ll_count_table_bytes(int nranks, int local_experts) {
  return static_cast<uint64_t>(nranks) * local_experts * sizeof(int32_t);
}
// Source `source`'s count for `local_expert`, from the table's start.
constexpr uint64_t ll_count_offset(int source, int local_expert, int local_experts) {
  return (static_cast<uint64_t>(source) * local_experts + local_expert) * sizeof(int32_t);
}
// A line step: a dispatch step of a one-node group whose ranks have at most
// ll_dispatch_line_steps tokens each (the group's largest step, max_tokens, or the step's
// bound EpcDispatchArgs.max_step_tokens): line_tokens or fewer, in at most kLlLineGroupBytes of
// messages to one rank. It moves as line records (but for passthrough rows:
// kernels/ll/ll_dispatch_lines.cuh): behind the count table,
// [nranks][line steps] records of twice a message, and the count table again as
// [nranks][local_experts] words: every 4 bytes at offset o of a message or table lies at 2 o in
// an 8-byte word beside the step's epoch (kernels/device/line_words.cuh), so that the receiver
// sees each arrive without waiting for the release of the source's signal, which the source
// stores before its messages. 0: no step does (line_tokens 0, as across nodes).
constexpr int ll_dispatch_line_steps(int line_tokens, uint64_t message_bytes) {
  const uint64_t fit = message_bytes > 0 ? kLlLineGroupBytes / message_bytes : 0;
  return line_tokens <= 0 ? 0 : static_cast<uint64_t>(line_tokens) < fit ? line_tokens : static_cast<int>(fit);
}
// A line group: one whose every step is a line step.
constexpr bool ll_dispatch_line_group(int line_tokens, int max_tokens, uint64_t message_bytes) {
  const int steps = ll_dispatch_line_steps(line_tokens, message_bytes);
  return steps > 0 && max_tokens <= steps;
}
// From the slot's start:
constexpr uint64_t ll_line_message_bytes(uint64_t message_bytes) { return 2 * message_bytes; }
constexpr uint64_t ll_dispatch_lines_offset(int nranks, int max_tokens, uint64_t message_bytes, int local_experts) {
  return (ll_count_table_offset(nranks, max_tokens, message_bytes) + ll_count_table_bytes(nranks, local_experts) +
          kLlMessageAlignment - 1) /
         kLlMessageAlignment * kLlMessageAlignment;
}
// Message (source, index < line_steps) as a line record, from the line records' start.
constexpr uint64_t ll_line_message_offset(int source, int index, int line_steps, uint64_t message_bytes) {
  return ll_record_offset(source, index, line_steps, ll_line_message_bytes(message_bytes));
}
// Source `source`'s count for `local_expert` as a line word, from the line records' start.
constexpr uint64_t ll_line_count_offset(int nranks, int line_steps, uint64_t message_bytes, int source,
                                        int local_expert, int local_experts) {
  return ll_line_message_offset(nranks, 0, line_steps, message_bytes) +
         2 * ll_count_offset(source, local_expert, local_experts);
}
// Bytes of a dispatch slot: its messages and count table, then where line steps can be
// (ll_dispatch_line_steps) its line records.
constexpr uint64_t ll_dispatch_slot_bytes(int nranks, int max_tokens, uint64_t message_bytes, int local_experts,
                                          int line_tokens) {
  const int steps = ll_dispatch_line_steps(line_tokens, message_bytes);
  return steps == 0
             ? ll_count_table_offset(nranks, max_tokens, message_bytes) + ll_count_table_bytes(nranks, local_experts)
             : ll_dispatch_lines_offset(nranks, max_tokens, message_bytes, local_experts) +
                   ll_line_count_offset(nranks, steps, message_bytes, nranks, 0, local_experts);
}

// Header bytes for `max_entries` entries, rounded so the payload starts 16-byte aligned.
constexpr size_t ll_message_header_bytes(size_t max_entries) {
  return (sizeof(LlMessageHeader) + max_entries * sizeof(LlMessageEntry) + kLlMessageAlignment - 1) /
         kLlMessageAlignment * kLlMessageAlignment;
}

// A slot's signal region: one row of kLlSignalRowWords uint64 words per writer rank. Word 0
// is the writer's step signal (its messages of the step landed in this slot: epoch << 32 |
// payload, dispatch's payload the number of messages); word 1 is the writer's credit (it has finished reading what this rank wrote into
// the writer's copy of this slot, up to the step whose step + 1 the word holds).
constexpr int kLlSignalRowWords = 2;
// A dispatch's step signal carries in its payload the messages the writer sent the reader (low
// 16 bits) and the writer's tokens in the step (high 16 bits), which tell the reader how the
// writer takes back its partials in the combine (ll_combine_parts.cuh).
constexpr uint32_t ll_dispatch_payload(uint32_t messages, uint32_t tokens) { return messages | tokens << 16; }
constexpr uint32_t ll_payload_messages(uint32_t payload) { return payload & 0xffffu; }
constexpr uint32_t ll_payload_tokens(uint32_t payload) { return payload >> 16; }
constexpr uint64_t ll_signal_row_bytes() { return kLlSignalRowWords * sizeof(uint64_t); }
// A low-latency step's epoch, what its signals and line words carry beside their data: 1 ..
// 2^30, never 0, so a zeroed word, or one no step has written yet (line records past the most
// tokens a source ever sent), never matches; steps get the same epoch only when they are a
// multiple of kLlEpochPeriod apart; bit 31 stays clear for kLlLineEpochBit. (It was step + 1
// in 32 bits, whose 0 at step 2^32 - 1, and whose line epoch 0 at step 2^31 - 1, matched such
// words at once.) A mask and an add, as cheap as the old epoch: every kernel takes it.
constexpr uint64_t kLlEpochPeriod = uint64_t{1} << 30;
constexpr uint32_t ll_step_epoch(uint64_t step) { return static_cast<uint32_t>(step & (kLlEpochPeriod - 1)) + 1; }
// A dispatch signal sent ahead of line records carries its step's epoch with this bit turned
// (line_step_epoch, kernels/device/step_signal.cuh), so that a receiver waiting for a records
// step's signal never takes it for its own, nor the other way round.
constexpr uint32_t kLlLineEpochBit = 0x80000000u;
// Whether signal word `seen` is the one a wait for epoch `wanted` gave up on because its writer
// moved the same step the other way (line records or records): the wanted epoch with the line
// bit turned. `wanted` 0: not a wait for a step signal.
constexpr bool ll_signal_of_other_kind(uint64_t seen, uint32_t wanted) {
  return wanted != 0 && static_cast<uint32_t>(seen >> 32) == (wanted ^ kLlLineEpochBit);
}
constexpr uint64_t ll_step_signal_offset(int writer) { return static_cast<uint64_t>(writer) * ll_signal_row_bytes(); }
constexpr uint64_t ll_credit_offset(int writer) { return ll_step_signal_offset(writer) + sizeof(uint64_t); }
constexpr uint64_t ll_signal_region_bytes(int nranks) { return ll_step_signal_offset(nranks); }

}  // namespace epc::kernels
