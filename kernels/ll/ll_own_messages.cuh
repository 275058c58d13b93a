// SPDX-License-Identifier: Apache-2.0
// A fused low-latency launch's messages to its own rank, which never enter the window
// (ll_step_kernel.cuh). Dispatch's receiving part rebuilds what their header and entries would
// have said from the handle's routing, and copies the rows from the caller's tokens: the
// rebuilt message is the one the sending part writes for every other rank, field for field,
// so the placement that follows cannot tell them apart. Combine's receiving part finds the
// records the dispatch kept of them (own_message_number) and reads the rows in the expert
// outputs.
#pragma once

#include "kernels/device/warp.cuh"
#include "kernels/wire/ll_message.hpp"
#include "kernels/wire/ll_params.hpp"

namespace epc::kernels {

// Whether a dispatch launch's rank sends itself nothing: a fused launch, whose receiving part
// can read its rows where the caller left them. The fp8 cast stays on the sending side: three
// ways of casting own rows in the receiving part measured slower (docs/design.md, "A rank's
// own messages").
template <LlPayload kPayload, bool kFused>
constexpr bool kDispatchOwnInPlace = kFused && kPayload != LlPayload::kFp8;

// A message's header and, lane i of the calling warp, its entry i (slots past the header's
// count are not used).
struct MessageView {
  LlMessageHeader header;
  LlMessageEntry entry;
};

// Called by one warp: message [source][token] as it lies in the slot.
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
  const bool here = expert >= 0 && expert / g.local_experts == g.rank;
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
    v.entry.local_expert = id - g.rank * g.local_experts;
    v.entry.position = c.layout == LlLayout::kExpertPadded ? at : slot;
    v.entry.weight = w;
  }
  return v;
}

// Called by one warp, the token layouts: this rank's tokens with an entry on itself, the count
// its last header would carry (the last token's place here, plus one if it has an entry
// here).
__device__ __forceinline__ int warp_own_tokens_here(const LlCommon& c) {
  if (c.num_tokens == 0) return 0;
  const int last = c.num_tokens - 1;
  const int lane = lane_id();
  const int expert = lane < c.topk ? c.handle.topk_idx[last * c.topk + lane] : -1;
  const int place = c.handle.token_places[static_cast<size_t>(last) * c.geo.nranks + c.geo.rank];
  const bool here = __ballot_sync(0xffffffffu, expert >= 0 && expert / c.geo.local_experts == c.geo.rank) != 0;
  return place + (here ? 1 : 0);
}

// Called by a whole warp, combine: the number of this rank's own message of its token t in
// the last dispatch's (source, token) order, under which the dispatch recorded its rows and
// weights (the tokens of lower ranks first).
__device__ __forceinline__ int own_message_number(const LlCommon& c, int t) {
  int before = 0;
  for (int s = lane_id(); s < c.geo.rank; s += kWarpSize) before += c.handle.recv_tokens[s];
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) before += __shfl_xor_sync(0xffffffffu, before, offset);
  return before + t;
}

}  // namespace epc::kernels
