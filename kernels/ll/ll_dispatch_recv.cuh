// SPDX-License-Identifier: Apache-2.0
// Low-latency dispatch, receiving half. Waits for every source's signal, which carries the
// number of messages it sent (ll_message_index.cuh), then places each message that came on
// its own: an entry's packed row inside its expert is the number of that
// expert's entries from lower source ranks (the count tables the sources sent) plus the
// entry's position, which gives the reference order (source rank, source token, top-k slot)
// with no scan. The token layouts place a message once, at its header's place in its
// source's zone (RANK_MAJOR) or after the tokens of lower source ranks (FLAT), and write its
// slots' expert ids and weights. One block per (message, slice of its row) copies its slice
// of the payload once into every row it feeds; the first slice's block records the rows and
// weights that combine will need. A fused launch may read its own rank's messages from the
// routing and the caller's tokens instead of its window (ll_own_messages.cuh); nothing else
// tells them apart. In a line step (dispatch_lines) every other message and every count
// table came as line records (ll_dispatch_lines.cuh), each word polled until it carries the
// step's epoch: the placing reads their headers and tables so, and a placed message's payload
// and scales are polled and stored by store_line_message.
#pragma once

#ifdef EPC_PHASE_TRACE
#include "kernels/device/phase_stamp.cuh"
#endif
#include "kernels/device/register_pick.cuh"
#include "kernels/device/scale_store.cuh"
#include "kernels/device/step_signal.cuh"
#include "kernels/device/step_wait.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/ll/ll_dispatch_lines.cuh"
#include "kernels/ll/ll_own_messages.cuh"
#include "kernels/ll/ll_received.cuh"
#include "kernels/ll/ll_row_stores.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/limits.hpp"
#include "kernels/wire/ll_message.hpp"
#include "kernels/wire/ll_params.hpp"

namespace epc::kernels::dispatch_recv {

static_assert(kMaxTopk <= kWarpSize, "a message's entries are placed one per lane of a warp");

// Rounds of a message's payload slice each thread loads before the message is placed (a
// hidden-7168 bf16 row is 896 vectors: two rounds of 512 threads).
constexpr int kPayloadPrefetchRounds = 2;

// Where the entries of one message go, worked out by its first warp into shared memory.
struct MessageRows {
  int entries;
  int flat_row[kMaxTopk];       // l * R*T + row, or -1 for an entry that did not fit
  int64_t scale_row[kMaxTopk];  // where the row's scales start in out_scales (elements),
                                // -1 for an entry that did not fit
};

// What the sources told this rank in the step: their signals' message counts, their count
// tables, and their messages' headers, those of `own` (-1: none; this rank, when it reads its
// own messages in place) taken from the routing instead; in a line step (`line_group`) the
// others' polled in their line records until they carry the step's `epoch`.
struct Received {
  const char* slots;
  const uint32_t* tokens_from;  // [nranks] (shared; in a launch alone, a register)
  const int32_t* table;         // [R][L]
  int own;
  int rank_tokens;  // the token layouts: this rank's tokens with an entry on itself
  bool line_group;
  uint32_t epoch;
  int* lines_failed;  // (shared) set when a line word did not come

  // Whether source s's messages and table came as line records.
  __device__ bool lines(int s) const { return line_group && s != own; }
  __device__ LineWait line_wait(const LlCommon& c, int s) const {
    return LineWait{c.timeout_ns, c.error, kPhaseDispatchReceive, c.dev_comm.rank, s};
  }
  __device__ const uint64_t* line_count(const LlCommon& c, int s, int l) const {
    return reinterpret_cast<const uint64_t*>(slots + c.geo.line_count_offset(0, s, l));
  }
  // Message (s, index) as a line record.
  __device__ const char* line_message(const LlGeometry& g, int s, int index) const {
    return slots + g.line_message_offset(0, s, index);
  }
  // The entries source s has for local expert l.
  __device__ int entries(const LlCommon& c, int s, int l) const {
    if (!lines(s)) {
      return s == own ? c.handle.expert_entries[own * c.geo.local_experts + l] : table[s * c.geo.local_experts + l];
    }
    uint32_t count = 0;
    if (!await_line_word(line_count(c, s, l), epoch, line_wait(c, s), &count)) *lines_failed = 1;
    return static_cast<int>(count);
  }
  // The entries sources [0, sources) have for local expert l. In a line step every count
  // loads at once, and only when one of them had not come are they read again, each polled.
  __device__ int entries_below(const LlCommon& c, int sources, int l) const {
    int sum = 0;
    if (!line_group) {
      for (int s = 0; s < sources; ++s) sum += entries(c, s, l);
      return sum;
    }
    bool came = true;
    for (int s = 0; s < sources; ++s) {
      if (!lines(s)) {
        sum += entries(c, s, l);
      } else {
        const uint64_t w = load_line_word(line_count(c, s, l));
        came = came && word_arrived(w, epoch);
        sum += static_cast<int>(word_data(w));
      }
    }
    if (came) return sum;
    sum = 0;
    for (int s = 0; s < sources; ++s) sum += entries(c, s, l);
    return sum;
  }
  // Called by one warp: message m.
  __device__ MessageView message(const LlDispatchParams& p, const ReceivedMessage& m) const {
    if (lines(m.source)) {
      const LineMessageView v = warp_await_line_message(line_message(p.common.geo, m.source, m.in_source), epoch,
                                                        line_wait(p.common, m.source));
      if (!v.ok && lane_id() == 0) *lines_failed = 1;
      return v.view;
    }
    return m.source == own
               ? own_message(p.common, p.weights, m.in_source)
               : stored_message(p.common.geo, slots + static_cast<size_t>(m.index) * p.common.geo.message_bytes);
  }
};

// The token layouts: the tokens source `s` sent this rank in the step, each with an entry
// here: its messages, or for this rank's own (one per token, ll_message_index.cuh) the count
// its routing gives.
__device__ __forceinline__ int tokens_sent_here(const LlCommon& c, const Received& r, int s) {
  return s == c.geo.rank ? r.rank_tokens : static_cast<int>(r.tokens_from[s]);
}

// The token layouts: the one row message `m` (`view`) feeds (none when the token has no
// entry here, or the header's place is out of range, which only a sender of another layout
// writes), and with `records` its slots' ids and weights and the handle's record of the row.
// Run by the block's first warp.
__device__ __forceinline__ void place_token(const LlDispatchParams& p, const MessageView& view,
                                            const ReceivedMessage& m, const Received& received, bool records,
                                            MessageRows* placed) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  const int lane = lane_id();
  const LlMessageHeader header = view.header;
  const LlMessageEntry entry = view.entry;
  int row = -1;
  int64_t scale_row = -1;
  if (header.entries > 0 && header.place >= 0 && header.place < g.max_tokens) {
    if (c.layout == LlLayout::kRankMajor) {
      row = m.source * g.max_tokens + header.place;
      scale_row = m.source * p.out_scales.expert_stride + header.place * p.out_scales.row_stride;
    } else {
      // The lanes share out the lower sources and sum their token counts.
      int before = 0;
      for (int s = lane; s < m.source; s += kWarpSize) before += tokens_sent_here(c, received, s);
      row = header.place + warp_sum(before);
      scale_row = row * p.out_scales.row_stride;
    }
  }
  if (lane == 0) {
    placed->entries = row >= 0 ? 1 : 0;
    placed->flat_row[0] = row;
    placed->scale_row[0] = scale_row;
    if (records) {
      // Combine sends this row back as it is (EPC_WEIGHTING_NONE).
      c.handle.msg_slot[m.number] = m.index;
      c.handle.msg_entries[m.number] = placed->entries;
      c.handle.msg_rows[static_cast<size_t>(m.number) * g.max_entries] = row;
      c.handle.msg_weights[static_cast<size_t>(m.number) * g.max_entries] = 1.0f;
    }
  }
  if (!records || row < 0) return;  // uniform over the warp
  const size_t slots_at = static_cast<size_t>(row) * c.topk;
  if (lane < c.topk) {
    if (p.out_topk_idx != nullptr) p.out_topk_idx[slots_at + lane] = -1;
    if (p.out_topk_weights != nullptr) p.out_topk_weights[slots_at + lane] = 0.0f;
  }
  __syncwarp();
  if (lane < header.entries) {
    const int slot = entry.position;  // the top-k slot in the token layouts
    if (slot >= 0 && slot < c.topk) {
      const int id = p.global_expert_ids ? g.rank * g.local_experts + entry.local_expert : entry.local_expert;
      if (p.out_topk_idx != nullptr) p.out_topk_idx[slots_at + slot] = id;
      if (p.out_topk_weights != nullptr) p.out_topk_weights[slots_at + slot] = entry.weight;
    }
  }
}

// The rows expert `l` received (summed over the count tables) and, when the caller accumulates
// counts, its running total, loaded before the messages are placed: the threads outside the
// first warp (which places) would otherwise only wait at the block barrier, and loaded after
// the messages these loads cost the block's part a round trip at its end. Stored after the
// messages (store_expert_count), so that no store precedes a placing.
struct ExpertCount {
  int expert;  // -1: none for this thread
  int rows;
  int64_t accumulated;
};

// The experts served early: one per thread outside the first warp of each block, this
// thread's (-1 for the first warp's threads), and how many the grid serves so.
__device__ __forceinline__ int early_counted_expert() {
  const int per_block = static_cast<int>(blockDim.x) - kWarpSize;
  return threadIdx.x < kWarpSize ? -1
                                 : static_cast<int>(blockIdx.x) * per_block + static_cast<int>(threadIdx.x) - kWarpSize;
}
__device__ __forceinline__ int early_counted_experts() {
  return static_cast<int>(gridDim.x * (blockDim.x - kWarpSize));
}

template <bool kByToken>
__device__ __forceinline__ ExpertCount load_expert_count(const LlDispatchParams& p, const Received& received, int l) {
  const LlGeometry& g = p.common.geo;
  ExpertCount count{-1, 0, 0};
  if (l < 0 || l >= g.local_experts) return count;
  const int rows = received.entries_below(p.common, g.nranks, l);
  // Expert zones hold R*T rows; the token layouts count (token, entry) pairs.
  const int expert_rows = g.nranks * g.max_tokens;
  count.expert = l;
  count.rows = kByToken || rows < expert_rows ? rows : expert_rows;
  if (p.acc_counts != nullptr) count.accumulated = p.acc_counts[l];
  return count;
}

__device__ __forceinline__ void store_expert_count(const LlDispatchParams& p, const ExpertCount& count) {
  if (count.expert < 0) return;
  p.out_counts[count.expert] = count.rows;
  if (p.acc_counts != nullptr) p.acc_counts[count.expert] = count.accumulated + count.rows;
}

// The whole part, run by every thread of every block; false when the block's wait failed, or a
// line word did not come (ll_step_kernel.cuh gives the slot's credits). kByToken: RANK_MAJOR or
// FLAT; kPayload: p.payload (ll_dispatch.cu); kFused: the launch also sent; kAlone: a launch
// alone in its group; kLines: the launch is a line step's (dispatch_lines, which the host
// tests), a template argument so that other groups' launches carry none of its code.
template <bool kByToken, LlPayload kPayload, bool kFused, bool kAlone, bool kLines>
__device__ __forceinline__ bool run(const LlDispatchParams& p, uint64_t step) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  const int lane = lane_id();
  extern __shared__ uint32_t tokens_from[];  // [nranks]
  // This rank's own messages, read in place when its sending part sent it none.
  const int own = kDispatchOwnInPlaceOrAlone<kPayload, kFused, kAlone> ? g.rank : -1;
  const SkippedPeer skipped{own, ll_dispatch_payload(c.num_tokens, c.num_tokens)};
  // A launch alone reads every message in place.
  constexpr bool line_group = kLines && !kAlone;
  // Loaded while the peers still send; the wait's barrier publishes it.
  __shared__ int rank_tokens;
  __shared__ int lines_failed;
  if (!kAlone && kByToken && threadIdx.x == 0) rank_tokens = c.handle.rank_tokens[g.rank];
  if (line_group && threadIdx.x == 0) lines_failed = 0;

  // A launch alone waits for nothing and keeps what the wait's barrier would publish in
  // registers: its message count, and in the token layouts its tokens, which each thread
  // loads (the same word for all: one load per warp).
  uint32_t alone_messages[1];
  const uint32_t* messages_from = tokens_from;
  int alone_rank_tokens = 0;
  if (kAlone) {
    alone_messages[0] = alone_step_messages(c.handle.recv_tokens, skipped);
    messages_from = alone_messages;
    if (kByToken) alone_rank_tokens = c.handle.rank_tokens[g.rank];
  } else if (!wait_for_step(c.transport, p.signal_offset, g.nranks,
                            line_group ? line_step_epoch(step) : step_epoch(step), c.handle.recv_tokens, tokens_from,
                            c.timeout_ns, c.error, kPhaseDispatchReceive, c.dev_comm.rank, skipped)) {
    return false;  // the failure is recorded; the group is failed
  }
#ifdef EPC_PHASE_TRACE
  if (blockIdx.x == 0 && threadIdx.x == 0) stamp_phase(c.phase_trace->dispatch, step, kLlPhaseWaitDone);
#endif

  const char* slots = static_cast<const char*>(c.transport.local(p.recv_offset));
  const Received received{
      slots,
      messages_from,
      reinterpret_cast<const int32_t*>(slots + ll_count_table_offset(g.nranks, g.max_tokens, g.message_bytes)),
      own,
      !kByToken ? 0
      : kAlone  ? alone_rank_tokens
                : rank_tokens,
      line_group,
      step_epoch(step),
      &lines_failed};
  const int expert_rows = g.nranks * g.max_tokens;
  constexpr bool by_token = kByToken;
  constexpr bool fp8 = kPayload == LlPayload::kFp8;
  constexpr bool passthrough = kPayload == LlPayload::kPassthrough;
  const size_t out_row_bytes =
      passthrough ? static_cast<size_t>(p.payload_row_bytes) : static_cast<size_t>(g.hidden) * (fp8 ? 1 : 2);
  const int messages = received_messages(messages_from, g.nranks);
  const int slices = p.message_slices;
  const ExpertCount early_count = load_expert_count<by_token>(p, received, early_counted_expert());
  // A row's scales behind its payload: the cast's fp32 scales, or the caller's elements.
  const int scale_count = passthrough ? p.scale_count : g.hidden / kFp8BlockChannels;
  const int scale_words_per_row = passthrough ? p.scale_count : scale_words(p.out_scales.encoding, scale_count);
  __shared__ MessageRows placed;
  for (int item = blockIdx.x; item < messages * slices; item += gridDim.x) {
    const int slice = slice_of(item, slices);
    const bool records = slice == 0;  // one block per message writes the handle's records
    const ReceivedMessage m = received_message(sliced_row(item, slices), messages_from, g.nranks, g.max_tokens);
    const bool in_place = m.source == own;
    // A line record's words lie at twice their offset (ll_dispatch_lines.cuh).
    const bool lines = received.lines(m.source);
    const char* line = lines ? received.line_message(g, m.source, m.in_source) : nullptr;
    const int4* line_payload = lines ? reinterpret_cast<const int4*>(line + 2 * g.header_bytes) : nullptr;
    const char* message = slots + static_cast<size_t>(m.index) * g.message_bytes;
    // An own message of the fp8 cast, cast here (kDispatchOwnInPlaceOrAlone).
    const bool cast_here = fp8 && in_place;
    // The payload does not depend on where it goes: its first vectors load while the first
    // warp places the message. An own message's row is the caller's, its scales behind it in
    // x_scales (passthrough).
    const char* payload_bytes = in_place
                                    ? static_cast<const char*>(p.x) + static_cast<size_t>(m.in_source) * p.x_row_bytes
                                    : message + g.header_bytes;
    const int4* payload = reinterpret_cast<const int4*>(payload_bytes);
    const VectorSlice part = cast_here ? own_cast_part(g.hidden, slice, slices)
                                       : vector_slice(static_cast<int>(out_row_bytes / 16), slice, slices);
    int4 first[kPayloadPrefetchRounds] = {};
    static_assert(kPayloadPrefetchRounds == 2, "a cast's first round is two 16-bit vectors");
    LinePrefetch line_first{};
    if (cast_here) {
      load_own_cast(payload_bytes, part.begin + fp8_cast_thread(), part.end, first);
    } else if (lines) {
      line_first = prefetch_line_payload(line_payload, part, received.epoch);
    } else {
#pragma unroll
      for (int r = 0; r < kPayloadPrefetchRounds; ++r) {
        const int v = part.begin + threadIdx.x + r * static_cast<int>(blockDim.x);
        if (v < part.end) first[r] = payload[v];
      }
    }
    // And the first scales this thread stores. The block's last threads store the scales:
    // its first ones store the payload, and a small step's slice of a row leaves the last
    // ones idle, so both go at once rather than one after the other.
    const char* scales_src = in_place && passthrough ? static_cast<const char*>(p.x_scales) +
                                                           static_cast<size_t>(m.in_source) * p.scale_bytes
                                                     : payload_bytes + out_row_bytes;
    const VectorSlice words = vector_slice(scale_words_per_row, slice, slices);
    uint4 first_scales = make_uint4(0, 0, 0, 0);
    if (((fp8 && !cast_here) || passthrough) && !lines) {
      first_scales = prefetch_row_scales(p.out_scales.encoding, scales_src, scale_count, words.begin, words.end,
                                         ScaleThread::from_block_end());
    }
    if (threadIdx.x < kWarpSize && by_token) {
      place_token(p, received.message(p, m), m, received, records, &placed);
    } else if (threadIdx.x < kWarpSize) {
      // Every entry slot loads with the header; slots past its count are not used.
      const MessageView view = received.message(p, m);
      const int entries = view.header.entries;
      const LlMessageEntry entry = view.entry;
      if (lane == 0) {
        if (records) {
          c.handle.msg_slot[m.number] = m.index;
          c.handle.msg_entries[m.number] = entries;
        }
        placed.entries = entries;
      }
      if (lane < entries) {
        const int l = entry.local_expert;
        const int row = entry.position + received.entries_below(c, m.source, l);
        int flat_row = -1;
        // Only duplicate expert ids in a row can overfill an expert; never write past it.
        if (row < expert_rows) {
          flat_row = l * expert_rows + row;
        } else if (records) {
          report_failure(c.error, EPC_ERR_INVALID_ARGUMENT, kPhaseRouting, c.dev_comm.rank, m.source, 0);
        }
        placed.flat_row[lane] = flat_row;
        placed.scale_row[lane] = flat_row < 0 ? -1 : l * p.out_scales.expert_stride + row * p.out_scales.row_stride;
        if (records) {
          const size_t at = static_cast<size_t>(m.number) * g.max_entries + lane;
          c.handle.msg_rows[at] = flat_row;
          c.handle.msg_weights[at] = entry.weight;
        }
      }
    }
    // The first vectors' cast, which needs no placing: the warps that do not place cast while
    // the first places (fp8_cast_thread gives it the round's last vectors).
    Fp8Vector16 first_cast{};
    if (cast_here && fp8_warp_casts(part.begin, part.end)) {
      first_cast = quarter_warp_cast(first, p.x_is_fp16, p.round_scale_ue8m0);
      hold_before_barrier(first_cast);
    }
    __syncthreads();
    if (cast_here) {
      cast_own_slice(p, payload_bytes, part, first_cast, placed.entries, placed.flat_row, placed.scale_row);
      if (item + static_cast<int>(gridDim.x) < messages * slices) __syncthreads();
      continue;
    }
    if (lines) {
      // A header alone (entries 0: this rank's own record of a token with no entry here) has
      // no payload to wait for.
      if (placed.entries > 0) {
        const LineMessageStores stores{line_payload,
                                       part,
                                       line_first,
                                       message_row_stores(p.out_x, out_row_bytes, placed.flat_row, placed.entries),
                                       fp8 ? line_word_at(line, g.header_bytes + out_row_bytes) : nullptr,
                                       p.out_scales,
                                       scale_count,
                                       words,
                                       placed.scale_row,
                                       placed.entries,
                                       received.epoch,
                                       received.line_wait(c, m.source)};
        if (!store_line_message(stores)) lines_failed = 1;
      }
      if (item + static_cast<int>(gridDim.x) < messages * slices) __syncthreads();
      continue;
    }
    // The slice of the payload, loaded once per vector and stored into every row it feeds.
    const MessageRowStores stores = message_row_stores(p.out_x, out_row_bytes, placed.flat_row, placed.entries);
    int round = 0;
    for (int v = part.begin + threadIdx.x; v < part.end; v += blockDim.x, ++round) {
      store_to_rows(stores, v, round < kPayloadPrefetchRounds ? register_pick(first, round) : payload[v]);
    }
    if (fp8) {
      store_cast_scales(p.out_scales, reinterpret_cast<const float*>(scales_src), scale_count, words.begin, words.end,
                        placed.entries, placed.scale_row, first_scales, ScaleThread::from_block_end());
    } else if (passthrough) {
      store_copied_scales(p.out_scales, scales_src, scale_count, words.begin, words.end, placed.entries,
                          placed.scale_row, first_scales, ScaleThread::from_block_end());
    }
    // `placed` is rewritten for the block's next message, if it has one.
    if (item + static_cast<int>(gridDim.x) < messages * slices) __syncthreads();
  }

  store_expert_count(p, early_count);
  // Experts past what the grid's threads served early (more than about 60000 per rank).
  for (int l = early_counted_experts() + blockIdx.x * blockDim.x + threadIdx.x; l < g.local_experts;
       l += gridDim.x * blockDim.x) {
    store_expert_count(p, load_expert_count<by_token>(p, received, l));
  }
  if (by_token && p.out_rank_counts != nullptr) {
    for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < g.nranks; s += gridDim.x * blockDim.x)
      p.out_rank_counts[s] = tokens_sent_here(c, received, s);
  }
  if (by_token && p.out_num_recv != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    int tokens = 0;
    for (int s = 0; s < g.nranks; ++s) tokens += tokens_sent_here(c, received, s);
    *p.out_num_recv = tokens;
  }

  if (!line_group) return true;
  __syncthreads();  // every awaited line word came, or lines_failed says which did not
  return lines_failed == 0;
}

}  // namespace epc::kernels::dispatch_recv
