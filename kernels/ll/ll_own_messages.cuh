// SPDX-License-Identifier: Apache-2.0
// A fused low-latency launch's messages to its own rank, which never enter the window
// (ll_step_kernel.cuh). Dispatch's receiving part rebuilds what their header and entries would
// have said from the handle's routing, and copies the rows from the caller's tokens: the
// rebuilt message is the one a sending part writes into its rank's own record of the token
// (ll_message_index.cuh), field for field, so the placement that follows cannot tell them
// apart. Combine's receiving part finds the
// records the dispatch kept of them (own_message_number) and reads the rows in the expert
// outputs. The fp8 cast's own rows are cast here only in a launch alone in its group
// (kDispatchOwnInPlaceOrAlone, cast_own_slice).
#pragma once

#include "kernels/device/fp8.cuh"
#include "kernels/device/scale_store.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/ll/ll_row_stores.cuh"
#include "kernels/wire/ll_message.hpp"
#include "kernels/wire/ll_params.hpp"

namespace epc::kernels {

// Whether a dispatch launch's rank sends itself nothing: a fused launch, whose receiving part
// can read its rows where the caller left them. The fp8 cast stays on the sending side, which
// casts a row once for every rank it goes to: three ways of casting own rows in the receiving
// part measured slower (docs/design.md, "A rank's own messages")...
template <LlPayload kPayload, bool kFused>
constexpr bool kDispatchOwnInPlace = kFused && kPayload != LlPayload::kFp8;

// Whether a fused launch is alone in its group (its rank the only one): every message it would
// send is its own, which it reads in place, so it has no sending part (ll_step_kernel.cuh).
constexpr int kLlAloneRanks = 1;
__host__ __device__ __forceinline__ bool fused_launch_alone(const LlGeometry& g) { return g.nranks == kLlAloneRanks; }

// ...but a launch alone (kAlone: the kernel of one, ll_step_kernel.cuh) casts them in its
// receiving part (cast_own_slice), code no other kernel carries.
template <LlPayload kPayload, bool kFused, bool kAlone>
constexpr bool kDispatchOwnInPlaceOrAlone = kDispatchOwnInPlace<kPayload, kFused> || kAlone;

// A message's header and, lane i of the calling warp, its entry i (slots past the header's
// count are not used).
struct MessageView {
  LlMessageHeader header;
  LlMessageEntry entry;
};

// Called by one warp: message [source][index] as it lies in the slot.
__device__ __forceinline__ MessageView stored_message(const LlGeometry& g, const char* message) {
  MessageView v{};
  v.header = *reinterpret_cast<const LlMessageHeader*>(message);
  const int lane = lane_id();
  if (lane < g.max_entries) v.entry = reinterpret_cast<const LlMessageEntry*>(message + sizeof(LlMessageHeader))[lane];
  return v;
}

// Called by one warp: the message this rank would send itself for its token t, from the
// routing (the sending part's route_token and header writes, ll_dispatch_send.cuh): the
// token's entries on this rank in top-k order, each with its local expert, its position
// (EXPERT_PADDED: among the routing's entries of its expert; token layouts: its top-k slot)
// and its weight (0 without `weights`); the header's place is t, or the token's place here in
// the token layouts.
__device__ __forceinline__ MessageView own_message(const LlCommon& c, const float* weights, int t) {
  static_assert(kMaxTopk <= kWarpSize, "a lane per top-k slot");
  const LlGeometry& g = c.geo;
  const int lane = lane_id();
  // Every slot's fields load at once; the entries here then take theirs by shuffles.
  int expert = -1, position = 0;
  float weight = 0.0f;
  if (lane < c.topk) {
    expert = c.handle.topk_idx[t * c.topk + lane];
    if (c.layout == LlLayout::kExpertPadded) position = c.handle.entry_positions[t * c.topk + lane];
    if (weights != nullptr) weight = weights[t * c.topk + lane];
  }
  // This rank's experts are a range: two compares instead of a division.
  const int first_here = g.rank * g.local_experts;
  const bool here = expert >= first_here && expert < first_here + g.local_experts;
  const unsigned slots = __ballot_sync(0xffffffffu, here);
  MessageView v{};
  v.header.entries = __popc(slots);
  v.header.place =
      c.layout == LlLayout::kExpertPadded ? t : c.handle.token_places[static_cast<size_t>(t) * g.nranks + g.rank];
  // Lane i takes the slot of the token's i-th entry here.
  unsigned later = slots;
  for (int i = 0; i < lane && later != 0; ++i) later &= later - 1;  // drops the lowest slot
  const int slot = later != 0 ? __ffs(later) - 1 : 0;
  const int id = __shfl_sync(0xffffffffu, expert, slot);
  const int at = __shfl_sync(0xffffffffu, position, slot);
  const float w = __shfl_sync(0xffffffffu, weight, slot);
  if (lane < v.header.entries) {
    v.entry.local_expert = id - first_here;
    v.entry.position = c.layout == LlLayout::kExpertPadded ? at : slot;
    v.entry.weight = w;
  }
  return v;
}

// The fp8 cast of an own row by the receiving part. A thread casts one 16-byte fp8 vector (16
// channels, two 16-bit vectors of the row); the 8 lanes of a quarter warp hold one 128-channel
// block. Slices of the row are whole warps of vectors: whole blocks, and whole words of packed
// UE8M0 scales (four blocks).
constexpr int kOwnCastGranule = kWarpSize;

__device__ __forceinline__ VectorSlice own_cast_part(int hidden, int slice, int slices) {
  return vector_slice(hidden / kVectorBytes, slice, slices, kOwnCastGranule);
}

// This thread's two 16-bit vectors of fp8 vector v of `row` into raw[0, 2) (zeros at or past
// `end`).
__device__ __forceinline__ void load_own_cast(const char* row, int v, int end, int4* raw) {
  raw[0] = raw[1] = make_int4(0, 0, 0, 0);
  if (v >= end) return;
  raw[0] = reinterpret_cast<const int4*>(row)[2 * v];
  raw[1] = reinterpret_cast<const int4*>(row)[2 * v + 1];
}

// The cast of fp8 vector v of `row` in a thread's later round, a call: a slice has a later
// round only when it has more vectors than the block has threads (never at hidden 7168), and
// inlined, this second copy of the cast sat between the instructions every launch runs.
__device__ __noinline__ static Fp8Vector16 cast_later_vector(const char* row, int v, int end, bool is_fp16,
                                                             bool round_scale_ue8m0) {
  int4 raw[2];
  load_own_cast(row, v, end, raw);
  return quarter_warp_cast(raw, is_fp16, round_scale_ue8m0);
}

// Called by every thread of the block: the slice `part` (own_cast_part) of the caller's row
// `row` cast to e4m3 exactly as the sending part casts it (ll_dispatch_send.cuh), stored with
// its blocks' scales into the `rows` entry rows `placed_rows` (out_x row numbers) and
// `scale_rows` (out_scales elements) of the message (negative: the entry did not fit). Thread
// fp8_cast_thread() of each round casts its vector; `first` is this thread's first vector,
// cast before the message was placed (quarter_warp_cast of load_own_cast's vectors).
__device__ __forceinline__ void cast_own_slice(const LlDispatchParams& p, const char* row, VectorSlice part,
                                               const Fp8Vector16& first, int rows, const int* placed_rows,
                                               const int64_t* scale_rows) {
  constexpr int kVectorsPerBlock = kFp8BlockChannels / (2 * kHalfChannelsPerVector);
  static_assert(kVectorsPerBlock == kWarpSize / 4, "a 128-channel block is a quarter warp's fp8 vectors");
  const int hidden = p.common.geo.hidden;
  const int rounds_end = part.begin + (part.end - part.begin + kWarpSize - 1) / kWarpSize * kWarpSize;
  // The rows' numbers, loaded while the row is cast.
  const MessageRowStores stores = message_row_stores(p.out_x, hidden, placed_rows, rows);
  const int first_v = part.begin + fp8_cast_thread();
  for (int v = first_v; v < rounds_end; v += blockDim.x) {
    const Fp8Vector16 cast =
        v == first_v ? first : cast_later_vector(row, v, part.end, p.x_is_fp16, p.round_scale_ue8m0);
    const bool valid = v < part.end;
    // The payload first: it is most of the bytes, and the scales' word and stores then
    // overlap its stores instead of holding them back.
    if (valid) {
      store_to_rows(stores, v,
                    make_int4(static_cast<int>(cast.q.x), static_cast<int>(cast.q.y), static_cast<int>(cast.q.z),
                              static_cast<int>(cast.q.w)));
    }
    warp_store_cast_scales(p.out_scales, cast.scale, v / kVectorsPerBlock, valid, rows, scale_rows);
  }
}

// Called by a whole warp, combine: the number of this rank's own message of its token t in
// the last dispatch's (source, index) order, under which the dispatch recorded its rows and
// weights (the messages of lower ranks first; a rank's messages to itself are one per token,
// ll_message_index.cuh).
__device__ __forceinline__ int own_message_number(const LlCommon& c, int t) {
  int before = 0;
  for (int s = lane_id(); s < c.geo.rank; s += kWarpSize) before += c.handle.recv_tokens[s];
  return warp_sum(before) + t;
}

}  // namespace epc::kernels
