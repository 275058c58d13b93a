// SPDX-License-Identifier: Apache-2.0
// High-throughput dispatch over credit rings inside a node (kernels/ht/ht_dispatch_rings.cuh),
// forced by two environment variables, a testing aid on the way to issue 27's rings across
// nodes (docs/design.md, "The staging map"): with EPCOMM_HT_RING_SLOTS=C (1 to
// kMaxRingSlots) a high-throughput group's FLAT dispatch sends its rows through rings of C
// slots per (writer, reader, channel), EPCOMM_HT_RING_CHANNELS=G of them (1 to
// kMaxRingChannels; unset or 0: as many as the group's grid serves, ring_channels_served) per
// pair of ranks, and its combine returns
// them the same way. The dispatch_recv and combine_recv regions then hold the rings instead of
// [R][T] slots, so the window no longer grows with the token count. Unset or 0: no rings (the
// default). Read by the planner, so at epc_group_create and epc_plan_query.
#pragma once

#include <cstdint>

#include "core/topology.hpp"
#include "kernels/wire/ht_params.hpp"
#include "kernels/wire/ht_ring.hpp"

namespace epc {

constexpr uint32_t kMaxRingSlots = 64;
constexpr uint32_t kMaxRingChannels = 1024;
// Warps of each role a block gives the rings: dispatch's and combine's sending and receiving
// warps alike (kernels/wire/ht_params.hpp).
constexpr uint32_t kRingWarpsPerBlock = 16;
static_assert(kernels::kHtDispatchSendWarps == kRingWarpsPerBlock &&
                  kernels::kHtBlockWarps - kernels::kHtDispatchSendWarps == kRingWarpsPerBlock &&
                  kernels::kHtRingCombineSendWarps == kRingWarpsPerBlock &&
                  kernels::kHtBlockWarps - kernels::kHtRingCombineSendWarps == kRingWarpsPerBlock,
              "ring_channels_served counts every role's warps per block alike");
using kernels::kHtRingMaxNodeSize;

struct RingRequest {
  uint32_t slots = 0;     // 0: no rings
  uint32_t channels = 0;  // 0: ring_channels_served
};

// The most channels a grid of `blocks` blocks serves in a node of `node_size` ranks: each
// channel takes a sending warp per reader in combine and a receiving warp per writer in
// dispatch (at least 1, at most kMaxRingChannels).
uint32_t ring_channels_served(uint32_t blocks, int node_size);

// From the environment; throws EPC_ERR_INVALID_ARGUMENT naming the variable for a value
// that is not a number in range.
RingRequest ht_rings_from_environment();

// The rings of `request` from window offset `base` (the dispatch_recv or combine_recv region,
// which then holds them and nothing else), each slot a header and `slot_bytes` of a dispatch
// or combine slot, with the channels a grid of `num_sms` blocks serves where the request
// names none: capacity 0 without a request. Throws EPC_ERR_UNSUPPORTED on a group of
// several nodes or a node of more than kHtRingMaxNodeSize ranks.
kernels::HtRingArea plan_ht_rings(const RingRequest& request, const Topology& topo, uint64_t base, uint32_t slot_bytes,
                                  uint32_t num_sms);

// How a dispatch or combine over rings would launch: `blocks` blocks of `send_warps` sending
// and `receive_warps` receiving warps, at most `fused_blocks` in one launch on this GPU, and
// the warps its rings need in each role.
struct RingLaunch {
  const char* call;  // "epc_dispatch" or "epc_combine"
  int blocks;
  int fused_blocks;
  int send_warps;
  int receive_warps;
  int64_t writers;  // sending warps the rings need
  int64_t readers;  // receiving warps the rings need
};

// Whether the launch can run over `rings` (nothing to check without rings): the FLAT layout,
// the whole step in one launch (readers spin on rings that writers of the same launch fill),
// and enough warps in each role. Throws EPC_ERR_UNSUPPORTED or EPC_ERR_INVALID_ARGUMENT naming
// what to change.
void check_ht_rings_served(const kernels::HtRingArea& rings, bool packed, bool send_only, const RingLaunch& launch);

}  // namespace epc
