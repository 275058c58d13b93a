// SPDX-License-Identifier: Apache-2.0
// Parameters of the high-throughput kernels, passed by value. Offsets are into the group's
// symmetric window (regions planned in core/planner.hpp, slots in kernels/wire/ht_message.hpp).
#pragma once

#include <cstdint>

#include "kernels/wire/device_error.hpp"
#include "kernels/wire/ht_capacity.hpp"
#include "kernels/wire/ht_message.hpp"
#include "kernels/wire/ht_ring.hpp"
#include "kernels/wire/sum_output.hpp"
#include "kernels/wire/transport.hpp"

namespace epc::kernels {

// Tuned constants; docs/tuning.md has the sweeps behind each.
//
// Warps per block that send in a fused dispatch (of 32; the others receive, or forward):
// half, since receiving a row costs about what sending it does.
constexpr int kHtDispatchSendWarps = 16;
// Warps of every high-throughput block (kernels/ht/ht_warp_roles.cuh launches 1024 threads).
constexpr int kHtBlockWarps = 32;
// The same for combine, whose receivers sum several rows per token, so that more senders
// starve them; the best count grows with the NVLink peers the rows go to: 3 per rank of
// the node, at most 12, none in nodes of one rank (every row goes to this rank's reducers).
__host__ __device__ constexpr int ht_combine_send_warps(int node_size) {
  return node_size <= 1 ? 0 : (3 * node_size < 12 ? 3 * node_size : 12);
}
// Combine over the node's forced rings (kernels/ht/ht_combine_rings.cuh): sending warps per
// block, a writer per ring, this rank's ring to itself included.
constexpr int kHtRingCombineSendWarps = 16;
// Across nodes, warps per block that forward tokens arriving from rail peers into the
// ranks of this node (dispatch; not yet tuned), taken from the receiving warps.
constexpr int kHtForwardWarps = 6;
// The same for combine, whose forwarding warps sum the node's rows for a remote source and
// put the partials: summing is the slow part, but fewer than about half the warps left to
// receive starve the receivers.
constexpr int kHtCombineForwardWarps = 14;

// Which launches of a step a high-throughput launch function queues: the whole step (one
// fused launch when the grid fits on the GPU, else the two halves back to back), or one half
// of a step split by EPC_STEP_SEND_ONLY: the sending part, then, at epc_complete, the
// receiving (and forwarding) part.
enum class HtHalves : uint8_t { kBoth, kSend, kReceive };

// Per-group device state. Step counters live on the device so that captured graphs advance
// them at every replay; every rank runs the same sequence of calls, so they agree.
struct HtState {
  uint64_t layout_step;
  uint64_t dispatch_step;
  uint64_t combine_step;
  uint32_t dispatch_done;  // blocks of the current launch that finished
  uint32_t combine_done;
};

// The k-th of the n - 1 members of a ring of n other than `me`, counted from the one after it.
__device__ __host__ inline int ring_member_after(int me, int k, int n) { return (me + 1 + k) % n; }

struct HtGeometry {
  int nranks;
  int rank;
  int local_experts;  // L
  int num_experts;    // E
  int max_tokens;     // T
  int hidden;         // H
  int topk;           // K of the handle
  HtDispatchSlot dispatch_slot;
  HtCombineSlot combine_slot;
  int node_size;  // ranks per node (every rank when the group is one node)
  int num_nodes;
  HtRailSlot rail_slot;  // with num_nodes > 1

  __device__ __host__ int node_of(int r) const { return r / node_size; }
  // num_nodes first: kernels compiled for one node fold it (ht_step_kernel.cuh).
  __device__ __host__ bool in_own_node(int r) const { return num_nodes == 1 || node_of(r) == node_of(rank); }
  // The rank with this rank's local index in node m: its peer on the rail to that node.
  __device__ __host__ int rail_peer(int m) const { return m * node_size + rank % node_size; }
  // The rank of this node with r's local index: r's rail peer here.
  __device__ __host__ int rail_peer_here(int r) const { return node_of(rank) * node_size + r % node_size; }
  __device__ __host__ bool is_rail_peer(int r) const { return r % node_size == rank % node_size; }
  // Combine's sending streams: the sources not on this rank's rail (the same local index in
  // any node), whose rows it returns; rows for those on its rail are read in place by its
  // receivers or reducers. Local indices vary first, so consecutive streams go to different
  // targets.
  __device__ __host__ int combine_send_streams() const { return num_nodes * (node_size - 1); }
  __device__ __host__ int combine_send_source(int k) const {
    const int others = node_size - 1;
    const int local = ring_member_after(rank % node_size, k % others, node_size);
    return (node_of(rank) + k / others) % num_nodes * node_size + local;
  }
  // True when a token whose rows on every rank are `rows` (token_row) has one on node m.
  __device__ __host__ bool node_receives(const int32_t* rows, int m) const {
    for (int i = 0; i < node_size; ++i) {
      if (rows[m * node_size + i] >= 0) return true;
    }
    return false;
  }
};

// The handle's layout, written by the layout kernel and read by dispatch and combine.
struct HtHandleArrays {
  int32_t* topk_idx;      // [T, K] validated routing
  int32_t* token_row;     // [T, R]: row j of token t among this rank's tokens for rank d, or -1
  int32_t* chunk_start;   // [T/C + 1, R]: tokens for rank d before chunk c (C = kHtChunkTokens)
  int32_t* entry_counts;  // [E] scratch: this rank's entries per global expert
  int32_t* recv_count;    // [R]: rows received and kept from each source (ht_capacity.hpp)
  int32_t* recv_base;     // [R + 1]: first row of each source; recv_base[R] = N, what arrived
  // Dispatch window slots (ht_capacity.hpp): where this rank's rows start in each rank's
  // window, and where each source's rows start in this rank's.
  int32_t* send_slot;  // [R]
  int32_t* recv_slot;  // [R]
  HtOverflowState* overflow;
  int32_t* source_tokens;  // [R]: each source's B
  int32_t* expert_counts;  // [L]: received (token, entry) pairs per local expert
  // Across nodes only (else null), written by the dispatch forwarders, read by combine's
  // reducers: for token t of this rank's rail peer in node m, its row on each rank i of
  // this node (-1: none there; all -1 for a token that did not come) and its global
  // expert ids (for the backward weights).
  int32_t* forwarded_rows;  // [nodes, T, node_size]
  int32_t* forwarded_topk;  // [nodes, T, K]
  // Across nodes only (else null), written by the layout, read by the dispatch forwarders:
  // where the rows of this rank's rail peer in node m start in the window of rank i of this
  // node (ht_capacity.hpp, ht_forward_slot).
  int32_t* forward_slot;  // [nodes, node_size]
  // EXPERT_PACKED handles only (else null). Sender side, from the routing: each entry's
  // place q among this rank's entries for the destination rank hosting its expert, in
  // (expert, token, slot) order.
  int32_t* entry_position;  // [T, K], -1 where masked
  // Receiver side, from the layout: where source s's entries of local expert l begin among
  // its entries for this rank (q), where its rows of expert l begin, and the zones' starts
  // (aligned; expert_offsets[L] is the rows the zones take).
  int32_t* source_starts;   // [R, L + 1]
  int32_t* expert_base;     // [R, L]
  int32_t* expert_offsets;  // [L + 1]
  // Written by dispatch, read by combine: the row of entry k of the token in slot [s][j]
  // (-1 where not local) and its weight (0 without dispatch weights).
  int32_t* entry_rows;   // [R, T, K]
  float* entry_weights;  // [R, T, K]
  // With rings only (else null), written by dispatch, read by combine: the source's token
  // index of each received row, which orders combine's rings (ht_combine_rings.cuh).
  int32_t* ring_tokens;  // [rows]
};

struct HtCommon {
  PeerTransport transport;
  HtGeometry geo;
  HtHandleArrays handle;
  HtState* state;
  DeviceError* error;
  uint64_t timeout_ns;
  int num_tokens;     // B of this rank
  int send_warps;     // of each block's kHtThreads / 32 warps in a fused launch, the sending ones (may be 0)
  int forward_warps;  // then the forwarding ones (dispatch across nodes, else 0)
};

// Layout: two slots used alternately by successive layouts, each [R] uint64 signals then
// [R][2 + L] uint32 words (kernels/wire/ht_message.hpp).
// Round two, which only layouts where some rank drops rows run, sends each rank the entries
// per local expert of the rows it keeps: [R] uint64 signals after round one's, and [R][L]
// uint32 words after round one's.
struct HtLayoutParams {
  HtCommon common;
  uint64_t slot_offset[kHtLayoutSlots];
  uint64_t words_offset;          // within a slot, where the words start
  uint64_t round2_signals;        // within a slot
  uint64_t round2_words_offset;   // within a slot
  int expert_alignment;           // EXPERT_PACKED: zone alignment (>= 1); 0: FLAT (no zones)
  int row_limit;                  // this rank's limit on the rows it receives (ht_capacity.hpp)
  bool compact_window;            // recv_capacity below R * T: compact dispatch slots
  bool fail_on_overflow;          // EPC_OVERFLOW_FAIL
  HtOverflowRecord* host_record;  // mapped: the overflow, for the host
  uint64_t sequence;              // the routing's number, into host_record
};

// A handle whose steps run in parts (core/ht/ht_parts.hpp), after every part's layout: each
// part's arrays lie one part's stride after the last one's, each part numbered its rows from
// 0 (kernels/ht/ht_parts.cu moves them behind the parts before).
struct HtPartsLayout {
  int32_t* recv_count;     // [parts][R]: rows each source sent in the part
  int32_t* recv_base;      // [parts][R + 1]: in, the part's own; out, the whole step's
  int32_t* expert_counts;  // [parts][L]: in, the part's; out, the whole step's in every part
  // EXPERT_PACKED (alignment > 0; else null): in, each part's zones of its own entries;
  // out, the whole step's zones, each part's rows of source s and expert l behind the rows
  // of s in the parts before.
  int32_t* expert_base;     // [parts][R * L]
  int32_t* expert_offsets;  // [parts][L + 1]
  int alignment;            // EXPERT_PACKED zone alignment; 0: FLAT
  int parts;
  int nranks;
  int local_experts;
  // One part's share of each array, as the handle allocates them.
  int recv_count_stride;
  int recv_base_stride;
  int expert_counts_stride;
  int expert_base_stride;
  int expert_offsets_stride;
};

// The sort that numbers an EXPERT_PACKED handle's entries per expert (ht_entry_order.cu).
struct HtEntryOrder {
  const int32_t* topk_idx;  // [entries]
  int32_t* positions;       // [entries]: out (the handle's entry_position)
  uint32_t* keys_in;        // [entries] scratch, as the three below
  uint32_t* keys_out;
  int32_t* values_in;
  int32_t* values_out;
  void* temp;
  size_t temp_bytes;
  int entries;  // B * K
  int num_experts;
  int local_experts;
};

// The three window areas of one direction (dispatch or combine).
struct HtChannel {
  uint64_t data_offset;   // [R][T] slots
  uint64_t flags_offset;  // [R][T/C] uint64 chunk flags
  uint64_t acks_offset;   // [R] uint64: "rank r has consumed my last step"
};

struct HtDispatchParams {
  HtCommon common;
  HtChannel channel;
  const void* x;               // [B, row_bytes]: 16-bit, e4m3 or e2m1 x2
  const void* x_scales;        // [B, scale_bytes] with passthrough, else null
  const float* weights;        // [B, K] or null
  void* out_x;                 // [rows, row_bytes]
  void* out_scales;            // [rows, scale_bytes] with passthrough
  int32_t* out_topk_idx;       // [rows, K] or null
  float* out_topk_weights;     // [rows, K] or null
  int32_t* out_expert_counts;  // [L] or null
  int64_t* acc_expert_counts;  // [L] or null: the layout's counts are added to it
  int32_t* out_num_recv;       // [1] or null
  int32_t expert_id_base;      // added to the local expert ids out_topk_idx holds (global ids)
  int row_bytes;               // payload bytes of one row (a multiple of 16)
  int scale_bytes;             // scale bytes of one row, any count (0: no scales)
  uint32_t scales_offset;      // where a slot's scales start: ht_scales_offset(row_bytes)
  // EXPERT_PACKED (handle arrays entry_position .. entry_weights set): each entry's own row
  // in expert zones; out_topk_weights is then [rows], out_topk_idx null. The launch reads
  // `packed` to pick the packed kernels; the kernels take the layout as a template flag.
  bool packed;
  bool zero_padding;              // packed: zero the zones' padding rows, scales and weights
  int32_t* out_expert_offsets;    // [L + 1] int32 or null
  int64_t* out_expert_offsets64;  // [L + 1] int64 or null
  uint64_t rail_data_offset;      // [nodes][T] rail slots, with more than one node
  uint64_t rail_flags_offset;     // [nodes][T/C] uint64 flags: chunk_flag(step, token mask, 0)
  // Capacity > 0: rows travel through the node's credit rings instead of the [R][T] slots
  // (kernels/ht/ht_dispatch_rings.cuh; FLAT, one node, fused launches).
  HtRingArea rings;
};

struct HtCombineParams {
  HtCommon common;
  HtChannel channel;
  const uint16_t* x;     // [rows, H] bf16
  const float* weights;  // [rows, K] with backward weights, else null
  void* out;             // [B, H] of out_type
  float* out_weights;    // [B, K] or null
  SumOutput out_type;
  // EXPERT_PACKED: x and weights are per row of the zones; the rows of one (token, rank) are
  // summed into one partial on the expert's rank, each multiplied by its dispatch weight when
  // `weighted` (EPC_WEIGHTING_SENDER). `packed` picks the kernels, as for dispatch.
  bool packed;
  bool weighted;
  // EXPERT_PACKED summed into bf16 or fp16: a token whose rows on a rank are one row sends
  // that row as its partial (to the token's rank, or across nodes to its rail peer there),
  // unweighted as it stands (rounding it through fp32 would not change it; bf16 and fp16 sums
  // keep one NaN, so a NaN's payload does not show), weighted as its products with the
  // weight, without the partial's loop over rows. The host sets it where tokens mostly have
  // one row per rank (top-k at most the rank count; weighted, top-1 only): the kernels that
  // check for it are slower for tokens with several (core/ht/ht_handle.cpp).
  bool lone_rows;
  // EPC_WEIGHTING_HOME (EXPERT_PACKED on a group with EPC_GROUP_COMBINE_PER_ENTRY; else
  // null and 0): every entry's row crosses unweighted into the per-entry slot
  // [writer][j * entry_slots + k] of its token's rank, which sums the rows of token t in
  // top-k order weighted by home_weights[t][k]. entry_slots is the group's max_topk, the
  // slots per stream position of its combine window. Non-null picks the per-entry kernels.
  const float* home_weights;  // [B, K]
  int entry_slots;
  // Capacity > 0: rows return through the node's credit rings instead of the [R][T] slots
  // (kernels/ht/ht_combine_rings.cuh; FLAT, one node, fused launches, after a dispatch over
  // rings).
  HtRingArea rings;
};

// Which combine kernels a launch runs (ht_combine.cu): FLAT, EXPERT_PACKED with one partial
// per (token, rank), the same where a token's one row on a rank is that rank's partial as it
// stands (kPackedLone, HtCombineParams::lone_rows), or EXPERT_PACKED with one row per (token,
// entry) (EPC_WEIGHTING_HOME).
enum class HtCombineKind : uint8_t { kFlat, kPacked, kPackedLone, kPackedHome };

// Whether a combine kind sums each (token, rank)'s rows into one partial.
constexpr bool packed_partials(HtCombineKind kind) {
  return kind == HtCombineKind::kPacked || kind == HtCombineKind::kPackedLone;
}

}  // namespace epc::kernels
