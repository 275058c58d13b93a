// SPDX-License-Identifier: Apache-2.0
// Low-latency dispatch, sending half. One block per token: it names the token's entries on
// every rank (local expert, position among this rank's entries for that expert or, in the
// token layouts, the top-k slot; weight) and writes a message into each rank hosting one of
// them, at its index there (ll_message_index.cuh: the ranks it does not go to get nothing):
// a header (the entries; in the token layouts the tokens before it sent there) and the
// payload, the row as it is (16-bit, or the caller's quantized row and its scale bytes), or
// quantized to e4m3 on the way. The rank's own record of the token gets a header even
// without entries there. Ranks of other nodes share one staged copy of the payload (the
// staging map stages it once per slot and token), written once and put to each of them. One
// block sends each rank the table of entries per local expert (counted when the routing was
// set); the last block to finish signals every rank with (epoch, the messages it sent it). A
// fused launch of 16-bit or passthrough rows sends its own rank nothing
// (ll_own_messages.cuh). In a line step (kLines) messages and tables go as line records and
// the signal goes first (ll_dispatch_lines.cuh).
#pragma once

#include "kernels/device/fp8.cuh"
#include "kernels/device/half_bits.cuh"
#include "kernels/device/launch_done.cuh"
#include "kernels/device/register_pick.cuh"
#ifdef EPC_PHASE_TRACE
#include "kernels/device/phase_stamp.cuh"
#endif
#include "kernels/device/step_signal.cuh"
#include "kernels/ll/ll_dispatch_lines.cuh"
#include "kernels/ll/ll_message_index.cuh"
#include "kernels/ll/ll_own_messages.cuh"
#include "kernels/ll/ll_slot_credit.cuh"
#include "kernels/ll/ll_token_routing.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ll_message.hpp"
#include "kernels/wire/ll_params.hpp"

namespace epc::kernels::dispatch_send {

constexpr int kChannelsPerVector = kHalfChannelsPerVector;
constexpr int kVectorsPerFp8Block = kFp8BlockChannels / kChannelsPerVector;  // 16 lanes

// Rounds of a row a thread loads before the token is routed, so that their latency overlaps
// the routing (hidden 7168 is 896 vectors: two rounds of 512 threads).
constexpr int kPrefetchRounds = 2;

struct RowPrefetch {
  int4 raw[kPrefetchRounds];
};

// Which of a round's vectors this thread sends: fp8_cast_thread() for the fp8 cast, whose first
// vectors are cast while the first warp routes the token, else its index.
__device__ __forceinline__ int payload_thread(LlPayload payload) {
  return payload == LlPayload::kFp8 ? fp8_cast_thread() : static_cast<int>(threadIdx.x);
}

// Thread `thread`'s vectors (payload_thread) of the first kPrefetchRounds rounds of the slice
// `part` of `row` (zeros past its end).
__device__ __forceinline__ RowPrefetch prefetch_row(const char* row, VectorSlice part, int thread) {
  RowPrefetch f;
#pragma unroll
  for (int r = 0; r < kPrefetchRounds; ++r) {
    const int v = part.begin + thread + r * static_cast<int>(blockDim.x);
    f.raw[r] = v < part.end ? reinterpret_cast<const int4*>(row)[v] : make_int4(0, 0, 0, 0);
  }
  return f;
}

// Where token t's message to `dest` starts in dest's window (its record there, at its index,
// ll_message_index.cuh); `places`: t's places (route_token).
__device__ __forceinline__ uint64_t message_at(const LlDispatchParams& p, int t, int dest, const int* places) {
  const LlCommon& c = p.common;
  return c.geo.message_offset(p.recv_offset, c.geo.rank, message_index(c, t, dest, places[dest]));
}
// And the offset its bytes are staged as for a destination in another node: this rank's record
// of the token (PeerTransport::record_buffer).
__device__ __forceinline__ uint64_t message_staged_as(const LlDispatchParams& p, int t) {
  return p.common.geo.message_offset(p.recv_offset, p.common.geo.rank, t);
}
// And where it starts as a line record in dest's window (ll_dispatch_lines.cuh; one node).
__device__ __forceinline__ uint64_t line_message_at(const LlDispatchParams& p, int t, int dest, const int* places) {
  const LlCommon& c = p.common;
  return c.geo.line_message_offset(p.recv_offset, c.geo.rank, message_index(c, t, dest, places[dest]));
}

// warp_find_payloads across nodes, a call (one-node launches never make it): ranks of other
// nodes all read the one staged copy of the payload, staged as `staged_as` (record_buffer()
// returns the same address for each of them), which is listed once, at its first such
// destination, so that send_payload writes it once; inside the node, each destination's own
// memory, as in one node. `payload_at`: this lane's destination's payload offset. The kernel's
// parameters stay out of its arguments: a call given their address would copy them into
// local memory, where every other use in the kernel would then read them.
__device__ __noinline__ static void warp_find_payloads_across_nodes(PeerTransport transport, uint64_t staged_as,
                                                                    uint64_t payload_at, const TokenRoute* route,
                                                                    int skipped, char** payloads, int* count) {
  static_assert(kMaxTopk <= kWarpSize, "a lane per destination");
  const int lane = lane_id();
  const bool valid = lane < route->num_dests && route->dest[lane] != skipped;
  const int dest = valid ? route->dest[lane] : 0;
  const bool staged = valid && !transport.in_node(dest);
  const unsigned staged_lanes = __ballot_sync(0xffffffffu, staged);
  const bool listed = valid && (!staged || lane == __ffs(staged_lanes) - 1);
  const unsigned listed_lanes = __ballot_sync(0xffffffffu, listed);
  if (listed) {
    payloads[__popc(listed_lanes & ((1u << lane) - 1))] =
        static_cast<char*>(transport.record_buffer(staged_as, payload_at, dest));
  }
  if (lane == 0) *count = __popc(listed_lanes);
}

// Called by one warp: where send_payload stores token t's payload: `payloads[0, *count)`,
// behind the header of its message to every destination but `skipped` (-1: none); with
// `lines`, of its line record (one node only).
__device__ __forceinline__ void warp_find_payloads(const LlDispatchParams& p, int t, const TokenRoute& route,
                                                   const int* places, int skipped, bool lines, char** payloads,
                                                   int* count) {
  const int lane = lane_id();
  const uint64_t header = p.common.geo.header_bytes;
  uint64_t payload_at = 0;
  if (lane < route.num_dests) {
    payload_at = lines ? line_message_at(p, t, route.dest[lane], places) + 2 * header
                       : message_at(p, t, route.dest[lane], places) + header;
  }
  if (!p.common.transport.one_node) {
    warp_find_payloads_across_nodes(p.common.transport, message_staged_as(p, t) + header, payload_at, &route, skipped,
                                    payloads, count);
    return;
  }
  const bool listed = lane < route.num_dests && route.dest[lane] != skipped;
  const unsigned listed_lanes = __ballot_sync(0xffffffffu, listed);
  if (listed) {
    payloads[__popc(listed_lanes & ((1u << lane) - 1))] =
        static_cast<char*>(p.common.transport.node_peer(payload_at, route.dest[lane]));
  }
  if (lane == 0) *count = __popc(listed_lanes);
}

// The fp8 cast of this thread's first vector (`first`'s round 0), made before the block's
// barrier so that it overlaps the first warp's routing (fp8_cast_thread).
__device__ __forceinline__ Fp8Vector8 cast_first_vector(const LlDispatchParams& p, const RowPrefetch& first) {
  static_assert(kVectorsPerFp8Block == kWarpSize / 2, "a 128-channel block is half a warp's vectors");
  return half_warp_cast(first.raw[0], p.x_is_fp16, p.round_scale_ue8m0);
}

// Stores the slice `part` of the token's payload through `payloads[0, count)`
// (warp_find_payloads). Each thread owns one 16-byte vector of the source row per round,
// payload_thread() of it (the first rounds already in `first`, for fp8 the first one's cast in
// `first_cast`); for fp8 the 16 lanes holding one 128-channel block agree on its scale through
// shuffles, so rounds are warp-uniform (slices start at whole warps of vectors). The
// destination loops stay loops (unroll 1), as they compiled before payload pointers were
// looked up apart from the messages: unrolled, they grew the kernel.
// With `lines` (a payload of 16-bit rows or the fp8 cast) `payloads` are line records' and
// `epoch` the step's: each 4 bytes go at twice their offset beside it (ll_dispatch_lines.cuh).
template <LlPayload kPayload>
__device__ __forceinline__ void send_payload(const LlDispatchParams& p, const char* row, const RowPrefetch& first,
                                             const Fp8Vector8& first_cast, VectorSlice part, char* const* payloads,
                                             int count, bool lines, uint32_t epoch) {
  const LlGeometry& g = p.common.geo;
  const int rounds_end = part.begin + (part.end - part.begin + kWarpSize - 1) / kWarpSize * kWarpSize;
  int round = 0;
  for (int v = part.begin + payload_thread(kPayload); v < rounds_end; v += blockDim.x, ++round) {
    const bool valid = v < part.end;
    int4 raw = make_int4(0, 0, 0, 0);
    if (round < kPrefetchRounds) {
      raw = register_pick(first.raw, round);
    } else if (valid) {
      raw = reinterpret_cast<const int4*>(row)[v];
    }
    if (kPayload != LlPayload::kFp8) {  // 16-bit rows and passthrough rows go as they are
      if (!valid) continue;
      if (kPayload == LlPayload::kHalf && lines) {
#pragma unroll 1
        for (int d = 0; d < count; ++d) store_line_vector(reinterpret_cast<int4*>(payloads[d]) + 2 * v, raw, epoch);
        continue;
      }
#pragma unroll 1
      for (int d = 0; d < count; ++d) {
        reinterpret_cast<int4*>(payloads[d])[v] = raw;
      }
      continue;
    }
    const Fp8Vector8 cast = round == 0 ? first_cast : half_warp_cast(raw, p.x_is_fp16, p.round_scale_ue8m0);
    if (!valid) continue;
    const int block = v / kVectorsPerFp8Block;
    if (lines) {
      // The 8 bytes of e4m3 at 8 v are two words of the line at 16 v; the scale at hidden + 4 b one.
#pragma unroll 1
      for (int d = 0; d < count; ++d) {
        char* payload = payloads[d];
        store_line_words(line_word_at(payload, 8 * static_cast<uint64_t>(v)), line_word(cast.q.x, epoch),
                         line_word(cast.q.y, epoch));
        if (v % kVectorsPerFp8Block == 0) {
          store_line_word(line_word_at(payload, g.hidden + 4 * static_cast<uint64_t>(block)),
                          line_word(__float_as_uint(cast.scale), epoch));
        }
      }
      continue;
    }
#pragma unroll 1
    for (int d = 0; d < count; ++d) {
      char* payload = payloads[d];
      reinterpret_cast<uint2*>(payload)[v] = cast.q;
      if (v % kVectorsPerFp8Block == 0) reinterpret_cast<float*>(payload + g.hidden)[block] = cast.scale;
    }
  }
}

// This thread's first count of the tables below (expert threadIdx.x), loaded before the
// block's tokens so that its latency overlaps theirs.
__device__ __forceinline__ int32_t first_table_count(const LlCommon& c) {
  const int experts = c.geo.nranks * c.geo.local_experts;
  return static_cast<int>(threadIdx.x) < experts ? c.handle.expert_entries[threadIdx.x] : 0;
}

// EPC_QUANT_PASSTHROUGH: the token's scale bytes, behind its row in every destination's
// message (in 32-bit words where their count allows: the host then requires x_scales to be
// 4-byte aligned; messages are 16-byte aligned).
__device__ __forceinline__ void send_scales(const LlDispatchParams& p, int t, char* const* payloads, int count) {
  const int at = p.payload_row_bytes;
  const char* scales = static_cast<const char*>(p.x_scales) + static_cast<size_t>(t) * p.scale_bytes;
  const bool words = p.scale_bytes % 4 == 0;
  const int units = words ? p.scale_bytes / 4 : p.scale_bytes;
  for (int i = threadIdx.x; i < units; i += blockDim.x) {
    if (words) {
      const uint32_t w = __ldg(reinterpret_cast<const uint32_t*>(scales) + i);
      for (int d = 0; d < count; ++d) reinterpret_cast<uint32_t*>(payloads[d] + at)[i] = w;
    } else {
      const unsigned char b = __ldg(reinterpret_cast<const unsigned char*>(scales) + i);
      for (int d = 0; d < count; ++d) reinterpret_cast<unsigned char*>(payloads[d] + at)[i] = b;
    }
  }
}

// Sends every rank but `skipped` the number of entries this rank has for each of its local
// experts (counted when the routing was set), `first` from first_table_count. Called by one
// block; ends synchronised.
__device__ __forceinline__ void send_count_tables(const LlDispatchParams& p, uint64_t table_offset, int32_t first,
                                                  int skipped) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  const int experts = g.nranks * g.local_experts;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    const int dest = g.rank_of_expert(e);
    if (dest == skipped) continue;
    const uint64_t offset = table_offset + ll_count_offset(g.rank, e - dest * g.local_experts, g.local_experts);
    const int32_t count = e == static_cast<int>(threadIdx.x) ? first : c.handle.expert_entries[e];
    *static_cast<int32_t*>(c.transport.buffer(offset, dest)) = count;
  }
  __syncthreads();
  const uint64_t bytes = static_cast<uint64_t>(g.local_experts) * sizeof(int32_t);
  for (int d = 0; d < g.nranks; ++d) {
    if (d == skipped) continue;
    c.transport.commit(table_offset + ll_count_offset(g.rank, 0, g.local_experts), bytes, d, threadIdx.x, blockDim.x);
  }
}

// The same as line words (ll_dispatch_lines.cuh), which need no commit and no barrier. Its own
// loop rather than one shared with send_count_tables through a callback: sharing it changed
// the register allocation of kernels that never send line records.
__device__ __forceinline__ void send_line_count_tables(const LlDispatchParams& p, int32_t first, int skipped,
                                                       uint32_t epoch) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  for (int e = threadIdx.x; e < g.nranks * g.local_experts; e += blockDim.x) {
    const int dest = g.rank_of_expert(e);
    if (dest == skipped) continue;
    const uint32_t count =
        static_cast<uint32_t>(e == static_cast<int>(threadIdx.x) ? first : c.handle.expert_entries[e]);
    const uint64_t offset = g.line_count_offset(p.recv_offset, g.rank, e - dest * g.local_experts);
    store_line_word(static_cast<uint64_t*>(c.transport.node_peer(offset, dest)), line_word(count, epoch));
  }
}

// What the part loads before the step's slot is claimed (ll_step_kernel.cuh): what the
// block's first item needs of the caller's row and the routing, the tables' first count and
// the first warp's signal payloads, so that these loads overlap the load of the slot's state.
struct EarlyLoads {
  RowPrefetch first_row;
  TokenEntry entry;  // the first warp's lanes
  int place;         // the first token's place on rank threadIdx.x
  int32_t first_count;
  uint32_t messages;  // the first warp: messages_to(rank threadIdx.x)
};

// The slice of x's row that item `item` sends (token item / slices), and token t's row: hidden
// 16-bit channels, or the caller's quantized row (x_row_bytes says which).
__device__ __forceinline__ VectorSlice item_part(const LlDispatchParams& p, int item) {
  return vector_slice(p.x_row_bytes / 16, slice_of(item, p.token_slices), p.token_slices, kWarpSize);
}
__device__ __forceinline__ const char* token_row(const LlDispatchParams& p, int t) {
  return static_cast<const char*>(p.x) + static_cast<size_t>(t) * p.x_row_bytes;
}

__device__ __forceinline__ EarlyLoads early_loads(const LlDispatchParams& p) {
  const LlCommon& c = p.common;
  EarlyLoads e{};
  const int item = static_cast<int>(blockIdx.x);
  if (item < c.num_tokens * p.token_slices) {
    const int t = sliced_row(item, p.token_slices);
    e.first_row = prefetch_row(token_row(p, t), item_part(p, item), payload_thread(p.payload));
    if (threadIdx.x < kWarpSize) e.entry = load_token_entry(c, p.weights, t);
    e.place = load_token_place(c, t);
  }
  e.first_count = blockIdx.x == gridDim.x - 1 ? first_table_count(c) : 0;
  if (static_cast<int>(threadIdx.x) < c.geo.nranks && threadIdx.x < kWarpSize) e.messages = messages_to(c, threadIdx.x);
  return e;
}

// What the step signal carries to `peer`, called by its lane of the first warp: how many
// messages came (the first warp's loaded early), and this rank's tokens (ll_dispatch_payload).
__device__ __forceinline__ uint32_t signal_payload(const LlCommon& c, const EarlyLoads& early, int peer) {
  const int sent = peer == static_cast<int>(threadIdx.x) ? early.messages : messages_to(c, peer);
  return ll_dispatch_payload(static_cast<uint32_t>(sent), static_cast<uint32_t>(c.num_tokens));
}

// The whole part, run by every thread of every block; true in the launch's last block, which
// has signalled every rank (ll_step_kernel.cuh records the step). kByToken: the handle's
// layout is RANK_MAJOR or FLAT; kPayload: p.payload (ll_dispatch.cu); kFused: the launch
// also receives; kLines: the launch sends line records (dispatch_lines, which the host tests), a
// template argument so that other groups' launches carry none of their code.
template <bool kByToken, LlPayload kPayload, bool kFused, bool kLines>
__device__ __forceinline__ bool run(const LlDispatchParams& p, uint64_t step, const EarlyLoads& early) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  // The rank this launch sends no message, header or table to (-1: none).
  const int skipped = kDispatchOwnInPlace<kPayload, kFused> ? g.rank : -1;
  __shared__ TokenRoute route;
  __shared__ char* payloads[kMaxTopk];
  __shared__ int payload_count;
  extern __shared__ int places[];  // [nranks] (send_shared)
#ifdef EPC_PHASE_TRACE
  if (blockIdx.x == 0 && threadIdx.x == 0) stamp_phase(c.phase_trace->dispatch, step, kLlPhaseStart);
#endif
  // The tables depend on the routing only: sent by the block with the fewest tokens, loaded
  // before its tokens and stored after them, and ordered before the signal by the
  // last-block count below.
  const bool tables = blockIdx.x == gridDim.x - 1;
  // Line records carry their own arrival: the signal, with the messages' count, goes first and
  // orders nothing, and the tables go before the tokens (ll_dispatch_lines.cuh).
  const bool lines = kLines && c.transport.one_node;
  const uint32_t epoch = step_epoch(step);
  if (lines && blockIdx.x == 0 && threadIdx.x < kWarpSize) {
    const auto payload = [&](int peer) { return signal_payload(c, early, peer); };
    warp_signal_every_peer(c.transport, p.signal_offset, g.nranks, g.rank, line_step_epoch(step), payload, skipped,
                           EveryPeerWaits{}, /*relaxed=*/true);
  }
  if (lines && tables) send_line_count_tables(p, early.first_count, skipped, epoch);

  // One block per (token, slice of its row); the first slice's block also writes the
  // headers and entries.
  const int slices = p.token_slices;
  constexpr bool fp8 = kPayload == LlPayload::kFp8;
  constexpr bool passthrough = kPayload == LlPayload::kPassthrough;
  RowPrefetch next_row = early.first_row;
  TokenEntry next_entry = early.entry;
  int next_place = early.place;
  for (int item = blockIdx.x; item < c.num_tokens * slices; item += gridDim.x) {
    const int t = sliced_row(item, slices);
    const bool first_slice = slice_of(item, slices) == 0;
    const VectorSlice part = item_part(p, item);
    const char* row = token_row(p, t);
    // This item's first row vectors and entries, loaded an item ahead (the first item's
    // before the slot was claimed); the block's next item's load now, so that it overlaps
    // this item's work.
    const RowPrefetch first = next_row;
    const TokenEntry entry = next_entry;
    const int place = next_place;
    const int next = item + static_cast<int>(gridDim.x);
    if (next < c.num_tokens * slices) {
      next_row = prefetch_row(token_row(p, sliced_row(next, slices)), item_part(p, next), payload_thread(kPayload));
      if (threadIdx.x < kWarpSize) next_entry = load_token_entry(c, p.weights, sliced_row(next, slices));
      next_place = load_token_place(c, sliced_row(next, slices));
    }
    // The first vector's fp8 cast: the warps after the first make it now, the first after its
    // routing and headers (fp8_cast_thread); a warp with no vector in the slice makes none.
    Fp8Vector8 first_cast{};
    if (fp8 && threadIdx.x >= kWarpSize && fp8_warp_casts(part.begin, part.end)) {
      first_cast = cast_first_vector(p, first);
      hold_before_barrier(first_cast);
    }
    const bool expert_positions = first_slice && !kByToken;
    route_token(c, entry, t, &route, expert_positions, places, place);  // ends with __syncthreads
    const uint64_t staged_as = message_staged_as(p, t);
    if (threadIdx.x < kWarpSize && first_slice) {
      // Headers: one per rank hosting an entry (entries in top-k order), and one in this rank's
      // own record of every token, which a receiver reads whether it has entries or not.
      const auto write_header = [&](int dest, int entries) {
        if (dest == skipped) return;
        if (lines) {
          store_line_header(static_cast<char*>(c.transport.node_peer(line_message_at(p, t, dest, places), dest)),
                            LlMessageHeader{kByToken ? places[dest] : t, entries}, epoch);
          return;
        }
        auto* header =
            static_cast<LlMessageHeader*>(c.transport.record_buffer(staged_as, message_at(p, t, dest, places), dest));
        header->place = kByToken ? places[dest] : t;
        header->entries = entries;
      };
      const int i = threadIdx.x;
      if (i < route.num_dests) write_header(route.dest[i], route.dest_entries[i]);
      if (i == 0 && route.entries_on_rank(g.rank) == 0) write_header(g.rank, 0);
      const int j = threadIdx.x;
      const int dest = j < c.topk && route.expert[j] >= 0 ? g.rank_of_expert(route.expert[j]) : skipped;
      if (dest >= 0 && dest != skipped) {
        char* message =
            lines ? nullptr
                  : static_cast<char*>(c.transport.record_buffer(staged_as, message_at(p, t, dest, places), dest));
        LlMessageEntry entry;
        entry.local_expert = route.expert[j] - dest * g.local_experts;
        entry.position = kByToken ? j : route.position[j];
        entry.weight = route.weight[j];
        if (lines) {
          store_line_entry(static_cast<char*>(c.transport.node_peer(line_message_at(p, t, dest, places), dest)),
                           route.index_on_rank[j], entry, epoch);
        } else {
          reinterpret_cast<LlMessageEntry*>(message + sizeof(LlMessageHeader))[route.index_on_rank[j]] = entry;
        }
      }
    }
    if (threadIdx.x < kWarpSize) warp_find_payloads(p, t, route, places, skipped, lines, payloads, &payload_count);
    if (fp8 && threadIdx.x < kWarpSize && fp8_warp_casts(part.begin, part.end)) {
      first_cast = cast_first_vector(p, first);
      hold_before_barrier(first_cast);
    }
    __syncthreads();
    send_payload<kPayload>(p, row, first, first_cast, part, payloads, payload_count, lines, epoch);
    if (passthrough && first_slice) send_scales(p, t, payloads, payload_count);
    // The network's puts read what every thread stored; inside one node commits do nothing.
    if (!c.transport.one_node) __syncthreads();
    // Ranks hosting an entry get a header (the first slice's), each slice's payload bytes and,
    // for fp8, its blocks' scales (passthrough: the first slice's block sends all of them);
    // across nodes put from the one staged copy, which the staging map finds for every
    // destination. This rank's own header-only record needs no commit: it is in the node.
    const uint64_t vector_bytes = fp8 ? 8 : 16;
    for (int i = 0; i < route.num_dests; ++i) {
      const int d = route.dest[i];
      if (d == skipped) continue;
      const uint64_t at = message_at(p, t, d, places);
      const auto commit = [&](uint64_t offset, uint64_t bytes) {
        c.transport.commit_record(staged_as + offset, at + offset, bytes, d, threadIdx.x, blockDim.x);
      };
      if (first_slice) commit(0, g.header_bytes);
      const uint64_t payload = g.header_bytes;
      if (passthrough && first_slice) commit(payload + p.payload_row_bytes, p.scale_bytes);
      if (part.end == part.begin) continue;
      commit(payload + part.begin * vector_bytes, (part.end - part.begin) * vector_bytes);
      if (fp8) {
        const int b0 = part.begin / kVectorsPerFp8Block;
        const int b1 = (part.end + kVectorsPerFp8Block - 1) / kVectorsPerFp8Block;
        commit(payload + g.hidden + b0 * sizeof(float), (b1 - b0) * sizeof(float));
      }
    }
    // `route` and `payloads` are rewritten for the block's next token, if it has one (the
    // count below begins with a barrier of its own).
    if (next < c.num_tokens * slices) __syncthreads();
  }
  if (tables && !lines) send_count_tables(p, g.count_table_offset(p.recv_offset), early.first_count, skipped);
#ifdef EPC_PHASE_TRACE
  if (blockIdx.x == 0 && threadIdx.x == 0) stamp_phase(c.phase_trace->dispatch, step, kLlPhasePayloadSent);
#endif

  const bool last = last_block_to_finish(&c.state->dispatch.send_done, /*publish_system=*/!c.transport.one_node);
  if (last) {
    if (threadIdx.x < kWarpSize) {
      // Inside a node each lane's release store orders every block's stores before its
      // signal (through the last-block count); the network's puts need the fence.
      if (!c.transport.one_node && threadIdx.x == 0) __threadfence_system();
      __syncwarp();
      const auto messages = [&](int peer) { return signal_payload(c, early, peer); };
      if (!lines) {
        warp_signal_every_peer(c.transport, p.signal_offset, g.nranks, g.rank, step_epoch(step), messages, skipped);
      }
#ifdef EPC_PHASE_TRACE
      if (threadIdx.x == 0) stamp_phase(c.phase_trace->dispatch, step, kLlPhaseSignalsSent);
#endif
    } else if (threadIdx.x < 2 * kWarpSize) {
      warp_give_owed_late(c, &c.state->dispatch, p.slot);
    }
  }
  return last;
}

}  // namespace epc::kernels::dispatch_send
