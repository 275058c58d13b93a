// SPDX-License-Identifier: Apache-2.0
// Parameters of the low-latency kernels, passed by value. Offsets are into the group's
// symmetric window, those of a step's receive slot and its signal region (the host picks the
// slot: core/ll/ll_steps.hpp).
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "kernels/wire/device_error.hpp"
#include "kernels/wire/limits.hpp"
#include "kernels/wire/ll_message.hpp"
#include "kernels/wire/ll_state.hpp"
#include "kernels/wire/scale_output.hpp"
#include "kernels/wire/sum_output.hpp"
#include "kernels/wire/transport.hpp"
#ifdef EPC_PHASE_TRACE
#include "kernels/wire/ll_phase_trace.hpp"
#endif

namespace epc::kernels {

// A division by a group constant as a multiply (LlGeometry::rank_of_expert, source_of_slot):
// a division by a count known only at run time is a chain of some twenty instructions a
// launch would wait for. quotient_multiplier(d, limit) is ceil(2^32 / d), with which the high
// word of n * it (multiply_quotient) is n / d for every n below `limit` when limit * d <=
// 2^32; 0 for d = 1 and where that bound fails.
__device__ __host__ constexpr uint32_t quotient_multiplier(int divisor, int64_t limit) {
  return divisor > 1 && static_cast<uint64_t>(limit) * static_cast<uint64_t>(divisor) <= (uint64_t{1} << 32)
             ? static_cast<uint32_t>(((uint64_t{1} << 32) + static_cast<uint64_t>(divisor) - 1) /
                                     static_cast<uint64_t>(divisor))
             : 0u;
}
__device__ __host__ inline int multiply_quotient(int n, uint32_t multiplier) {
#ifdef __CUDA_ARCH__
  return static_cast<int>(__umulhi(static_cast<unsigned>(n), multiplier));
#else
  return static_cast<int>((static_cast<uint64_t>(n) * multiplier) >> 32);
#endif
}

// Geometry shared by every low-latency kernel of a group.
struct LlGeometry {
  int nranks;
  int rank;
  int local_experts;  // L
  int max_tokens;     // T
  int row_bytes;      // one token row: hidden * 2
  int hidden;
  int message_bytes;  // header + row in a dispatch receive buffer, padded to 16 bytes
  int header_bytes;
  int max_entries;  // entries one message header can hold (max_topk: duplicate ids may
                    // put every entry on one rank)
  // Bytes of one (source, index) record of a combine slot: row_bytes, or max_entries *
  // row_bytes on groups with EPC_GROUP_COMBINE_PER_ENTRY (ll_combine_record_bytes).
  int combine_record_bytes;
  // The most tokens a rank may have in a step to take its combine partials back as line
  // records, and the line records per source in a combine slot (0: none; a one-node group's
  // min(max_tokens, kLlLineTokens) unless the environment sets it, core/plan.hpp); when it is
  // max_tokens and the steps are small, the group's dispatches move as line records too
  // (ll_dispatch_line_group).
  int line_tokens;
  // The most tokens per rank of a step whose dispatch moves as line records, and the line
  // records per source in a dispatch slot (ll_dispatch_line_steps; 0: none).
  int dispatch_line_tokens;
  // quotient_multiplier(L, R * L) and quotient_multiplier(T, R * T), set by the host. The first
  // is 0 only for L = 1 (R * L <= 2^16 experts and L <= 2^16 keep R * L * L within 2^32); the
  // second also where R * T * T passes 2^32, and source_of_slot then divides.
  uint32_t expert_rank_multiplier;
  uint32_t slot_source_multiplier;

  // The rank that hosts expert `expert` (0 <= expert < R * L), expert / L.
  __device__ __host__ int rank_of_expert(int expert) const {
    return local_experts == 1 ? expert : multiply_quotient(expert, expert_rank_multiplier);
  }
  // The source of record slot `slot` (0 <= slot < R * T: source * T + index), slot / T.
  __device__ __host__ int source_of_slot(int slot) const {
    return slot_source_multiplier == 0 ? slot / max_tokens : multiply_quotient(slot, slot_source_multiplier);
  }

  // Window offsets inside the receive slot that starts at `slot` (kernels/wire/ll_message.hpp);
  // `index`: the record's among its source's (kernels/ll/ll_message_index.cuh).
  __device__ __host__ uint64_t message_offset(uint64_t slot, int source, int index) const {
    return slot + ll_record_offset(source, index, max_tokens, static_cast<uint64_t>(message_bytes));
  }
  __device__ __host__ uint64_t count_table_offset(uint64_t slot) const {
    return slot + ll_count_table_offset(nranks, max_tokens, static_cast<uint64_t>(message_bytes));
  }
  // In a line step: message (source, index) as a line record, and source's count for local
  // expert l as a line word.
  __device__ __host__ uint64_t line_message_offset(uint64_t slot, int source, int index) const {
    const uint64_t lines =
        ll_dispatch_lines_offset(nranks, max_tokens, static_cast<uint64_t>(message_bytes), local_experts);
    return slot + lines +
           ll_line_message_offset(source, index, dispatch_line_tokens, static_cast<uint64_t>(message_bytes));
  }
  __device__ __host__ uint64_t line_count_offset(uint64_t slot, int source, int l) const {
    const uint64_t lines =
        ll_dispatch_lines_offset(nranks, max_tokens, static_cast<uint64_t>(message_bytes), local_experts);
    return slot + lines +
           ll_line_count_offset(nranks, dispatch_line_tokens, static_cast<uint64_t>(message_bytes), source, l,
                                local_experts);
  }
  // The partial of message (source, index) (EPC_WEIGHTING_SENDER, NONE): its record's first
  // row, entry row 0 on a per-entry group (ll_partial_offset).
  __device__ __host__ uint64_t partial_offset(uint64_t slot, int source, int index) const {
    return slot + ll_partial_offset(source, index, max_tokens, static_cast<uint64_t>(combine_record_bytes));
  }
  // Where the partial of message (source, index) goes as a line record (index < line_tokens).
  __device__ __host__ uint64_t line_partial_offset(uint64_t slot, int source, int index) const {
    const uint64_t records = ll_record_offset(nranks, 0, max_tokens, static_cast<uint64_t>(combine_record_bytes));
    return slot + ll_line_partial_offset(records, source, index, line_tokens, static_cast<uint64_t>(row_bytes));
  }
  // EPC_WEIGHTING_HOME: entry `entry` of message (source, index), in a combine slot of
  // [nranks][max_tokens][max_entries] rows.
  __device__ __host__ uint64_t entry_row_offset(uint64_t slot, int source, int index, int entry) const {
    return slot + ll_entry_row_offset(source, index, entry, max_tokens, max_entries, static_cast<uint64_t>(row_bytes));
  }
};

// The handle's device arrays, written by the dispatch receive and read by combine.
struct LlHandleArrays {
  const int32_t* topk_idx;  // [B, K] int32, validated
  int32_t* recv_tokens;     // [2R] messages each source sent in the last dispatch, then the
                            // source's tokens in that step (its dispatch signal's payload)
  // The last dispatch's records of its received messages, message n (in (source, index)
  // order, ll_received.cuh) at n, so that combine can load message n's without first
  // reading recv_tokens to find where it is: its slot source * T + index, its entries, the
  // flat row l * R*T + row and the weight of each.
  int32_t* msg_slot;     // [R * T]
  int32_t* msg_entries;  // [R * T]
  int32_t* msg_rows;     // [R * T, max_entries]
  float* msg_weights;    // [R * T, max_entries]
  // [num_experts] entries of the routing per expert, counted when the routing is set: the
  // count table each dispatch sends every rank.
  const int32_t* expert_entries;
  // [B, K] each unmasked entry's position among the routing's entries of its expert in
  // (token, top-k slot) order, found when the routing is set (routing_copy.cu), so that a
  // dispatch places an entry without counting the entries of the tokens before it.
  const int32_t* entry_positions;
  // [B, R] token t's place on rank d, the tokens before t with an unmasked entry on d, found
  // when the routing is set too: where t's message to a peer d lies (ll_message_index.cuh),
  // and in the token layouts what its header carries.
  const int32_t* token_places;
  // [R] the routing's tokens with an unmasked entry on each rank: the messages a dispatch
  // sends each peer, which its signal carries.
  const int32_t* rank_tokens;
  // [kLlStepRecords] the step number of the handle's last dispatch and combine, written by
  // their sending launch: the receiving launch of a send-only step reads its step here.
  uint64_t* steps;
};

// How a dispatch places what it receives (EpcHandleConfig.layout on LL groups): one row per
// entry in its expert's zone, or one row per received token (the token layouts), in its
// source's zone of max_tokens rows or back to back over all sources.
enum class LlLayout : int32_t { kExpertPadded = 0, kRankMajor = 1, kFlat = 2 };

struct LlCommon {
  ncclDevComm dev_comm;
  PeerTransport transport;  // this rank's window and the peers' (the only way to them)
  LlGeometry geo;
  LlHandleArrays handle;
  LlState* state;
  DeviceError* error;
  uint64_t timeout_ns;
  int num_tokens;  // B of this rank
  // The most tokens any rank has in the step: the caller's EpcDispatchArgs.max_step_tokens,
  // the same on every rank, or T. Only the dispatch reads it (dispatch_lines).
  int step_tokens;
  int topk;         // K
  LlLayout layout;  // the handle's, the same on every rank of a step
#ifdef EPC_PHASE_TRACE
  LlPhaseTrace* phase_trace;  // the group's (core/ll/ll_steps.hpp), stamped by the LL kernels
#endif
};

// The parts that walk received messages (dispatch receive, combine send) may split each
// message's row into this many slices, one block each, so that a small step spreads its few
// rows over several SMs; a vector slice's range is vector_slice().
constexpr int kLlMaxMessageSlices = 8;

// Slice counts are powers of two (the host's LlHandle::slices_for), so that a kernel splits an
// item number into its row and slice by shifts: a division by a count known only at run time
// is a dependent chain of some twenty instructions before a launch's first load.
__device__ __host__ constexpr bool is_slice_count(int slices) {
  return slices >= 1 && slices <= kLlMaxMessageSlices && (slices & (slices - 1)) == 0;
}
static_assert(is_slice_count(kLlMaxMessageSlices), "the most slices is a power of two");
// The slices each of `items` rows takes on `blocks` blocks: few items leave most blocks idle,
// so each row is split over the most blocks that fit, a power of two up to kLlMaxMessageSlices.
__device__ __host__ constexpr int ll_slice_count(int blocks, int items) {
  const int fit = blocks / (items > 0 ? items : 1);
  int slices = 1;
  while (slices * 2 <= fit && slices * 2 <= kLlMaxMessageSlices) slices *= 2;
  return slices;
}
static_assert(ll_slice_count(132, 1) == 8 && ll_slice_count(132, 20) == 4 && ll_slice_count(132, 256) == 1,
              "a power of two of the blocks that fit");

// A dispatch or combine fused into a launch alone in its group (one rank: it waits for
// nothing, so its blocks need not all be resident at once) whose rows fill the SMs one block
// each (more tokens than half the budget) runs twice the blocks, of half the threads (the
// operations' threads()), and splits its rows for them: two blocks per SM keep more of its
// row loads and stores in flight and use the SMs a whole-row block left idle
// (docs/tuning.md). Only on a budget of the whole GPU: blocks are placed by the hardware, and
// with two per SM they could spread beyond a smaller budget's SMs.
constexpr int kLlAloneBlocksPerSm = 2;
__host__ constexpr int ll_alone_blocks_per_sm(int nranks, bool fused, int budget, int device_sms, int tokens) {
  return nranks == 1 && fused && budget >= device_sms && ll_slice_count(budget, tokens) == 1 ? kLlAloneBlocksPerSm : 1;
}
static_assert(ll_alone_blocks_per_sm(1, true, 132, 132, 128) == 2 &&
                  ll_alone_blocks_per_sm(1, true, 132, 132, 66) == 1 &&
                  ll_alone_blocks_per_sm(2, true, 132, 132, 128) == 1 &&
                  ll_alone_blocks_per_sm(1, false, 132, 132, 128) == 1 &&
                  ll_alone_blocks_per_sm(1, true, 66, 132, 128) == 1,
              "two blocks per SM for a one-rank fused step of more tokens than half the whole GPU's SMs");
__device__ __host__ inline int slice_shift(int slices) {
#ifdef __CUDA_ARCH__
  return __ffs(slices) - 1;
#else
  return __builtin_ctz(static_cast<unsigned>(slices));
#endif
}
// Item `item` of a walk of `slices` slices per row: its row, and its slice of that row.
__device__ __host__ inline int sliced_row(int item, int slices) { return item >> slice_shift(slices); }
__device__ __host__ inline int slice_of(int item, int slices) { return item & (slices - 1); }

// The [begin, end) range of 16-byte vectors of slice `slice` of `slices` (a slice count) over
// `vectors`, its bounds multiples of `granule` vectors (but the last end).
struct VectorSlice {
  int begin;
  int end;
};
__device__ __host__ inline VectorSlice vector_slice(int vectors, int slice, int slices, int granule = 1) {
  const int granules = (vectors + granule - 1) / granule;
  const int per = ((granules + slices - 1) >> slice_shift(slices)) * granule;
  const int begin = slice * per < vectors ? slice * per : vectors;
  const int end = begin + per < vectors ? begin + per : vectors;
  return {begin, end};
}

// What a dispatch carries: the caller's 16-bit rows unchanged, e4m3 bytes plus one fp32
// scale per 128 channels quantized by the send kernel, or the caller's quantized rows and
// scale bytes unchanged (EPC_QUANT_PASSTHROUGH).
enum class LlPayload : int32_t { kHalf = 0, kFp8 = 1, kPassthrough = 2 };

struct LlDispatchParams {
  LlCommon common;
  int slot;  // the step's receive slot, 0..slots-1
  // Beside `slot`, in the 4 bytes before recv_offset: a kernel's parameters are read through
  // the constant cache a line at a time, and this line is read early by every launch, so the
  // fp8 cast's two flags cost no line of their own (bench/results/ll_session29_2xh200.md).
  bool x_is_fp16;          // x is fp16 (else bf16): what the fp8 cast widens
  bool round_scale_ue8m0;  // the fp8 cast rounds each scale up to a power of two
  uint64_t recv_offset;    // of that slot's receive region
  uint64_t signal_offset;  // of that slot's signal region (kernels/wire/ll_message.hpp)
  const void* x;           // [B, H] bf16 or fp16, or (kPassthrough) [B, payload_row_bytes]
  const void* x_scales;    // kPassthrough: [B, scale_bytes], else null
  const float* weights;    // [B, K], or null (token layouts without out_topk_weights: 0)
  void* out_x;             // [L, R*T, H] (token layouts: [R*T, H]) of x's dtype, or e4m3 bytes,
                           // or (kPassthrough) rows of payload_row_bytes
  ScaleOutput out_scales;  // [L, R*T, scale_count] (token layouts: [R, T, ...] or [R*T, ...],
                           // expert_stride the zone's) with kFp8 and kPassthrough, else data null
  int x_row_bytes;         // bytes of a row of x: hidden * 2, or payload_row_bytes
  int payload_row_bytes;   // bytes of the row in a message and in out_x: hidden * 2, hidden (kFp8)
                           // or the passthrough row; the scales follow it in the message
  int scale_count;         // scales per row: hidden / 128 (kFp8), S (kPassthrough), else 0
  int scale_bytes;         // their bytes in a message: scale_count * 4 (kFp8), S * element
  int32_t* out_counts;     // [L]: the caller's, or the handle's own
  int64_t* acc_counts;     // [L] or null: out_counts are added to it
  // Token layouts only, each null when not asked for: per received row its K slots' expert
  // ids (-1 off this rank) and weights (0 off this rank), [R*T, K]; tokens per source [R];
  // tokens received [1].
  int32_t* out_topk_idx;
  float* out_topk_weights;
  int32_t* out_rank_counts;
  int32_t* out_num_recv;
  bool global_expert_ids;  // out_topk_idx: rank * L + local id
  int message_slices;      // blocks per received message in the receiving part (1..kLlMaxMessageSlices)
  int token_slices;        // blocks per token in the sending part (1..kLlMaxMessageSlices)
  int blocks_per_sm;       // 1, or kLlAloneBlocksPerSm (ll_alone_blocks_per_sm)
  LlPayload payload;
};

struct LlCombineParams {
  LlCommon common;
  int slot;                    // the step's receive slot, 0..slots-1
  uint64_t recv_offset;        // of that slot's receive region
  uint64_t signal_offset;      // of that slot's signal region (kernels/wire/ll_message.hpp)
  const uint16_t* expert_out;  // [L, R*T, H] bf16
  void* out;                   // [B, H] of out_type
  SumOutput out_type;
  // EPC_WEIGHTING_HOME: [B, K] fp32, the token's rank's weights; every entry's row returns
  // unweighted into a per-entry combine slot (LlGeometry::entry_row_offset). Null: SENDER.
  const float* home_weights;
  int message_slices;  // blocks per received message in the sending part (1..kLlMaxMessageSlices)
  int token_slices;    // blocks per token in the receiving part (1..kLlMaxMessageSlices)
  int blocks_per_sm;   // 1, or kLlAloneBlocksPerSm (ll_alone_blocks_per_sm)
};

// A slot whose step this rank will never receive (its handle was destroyed with the step
// pending) is freed as a receive would free it: its credits go to every source
// (kernels/ll/ll_slot_release.cu).
struct LlSlotReleaseParams {
  PeerTransport transport;
  const LlOpState* op;     // the slot's direction
  uint64_t signal_offset;  // of the slot's signal region
  int slot;
  int nranks;
  int rank;
};

struct RoutingCopyParams {
  const void* topk_idx;  // [B, K] int64 or int32
  int index_bytes;       // 8 or 4
  int count;             // B * K
  int num_experts;
  int rank;
  int32_t* out;  // [B, K] int32
  // Both or neither (LL handles): the routing's entries per expert ([num_experts]) and each
  // unmasked entry's position among its expert's entries in (token, slot) order ([B, K];
  // -1 for a masked entry).
  int32_t* expert_entries;
  int32_t* entry_positions;
  // And, LL handles too, each token's place on every rank ([B, ranks], ranks hosting
  // local_experts each) and the tokens with an entry on each rank ([ranks]).
  int32_t* token_places;
  int32_t* rank_tokens;
  int ranks;
  int local_experts;
  int topk;  // K
  DeviceError* error;
};

}  // namespace epc::kernels
