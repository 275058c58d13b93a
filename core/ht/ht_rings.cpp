// SPDX-License-Identifier: Apache-2.0
#include "core/ht/ht_rings.hpp"

#include <algorithm>

#include "core/env_count.hpp"
#include "core/error.hpp"

namespace epc {

RingRequest ht_rings_from_environment() {
  RingRequest r;
  r.slots = env_count("EPCOMM_HT_RING_SLOTS", 0, kMaxRingSlots);
  r.channels = env_count("EPCOMM_HT_RING_CHANNELS", 0, kMaxRingChannels);
  return r;
}

uint32_t ring_channels_served(uint32_t blocks, int node_size) {
  const uint64_t served = uint64_t{blocks} * kRingWarpsPerBlock / static_cast<uint64_t>(node_size > 0 ? node_size : 1);
  return static_cast<uint32_t>(std::clamp<uint64_t>(served, 1, kMaxRingChannels));
}

kernels::HtRingArea plan_ht_rings(const RingRequest& request, const Topology& topo, uint64_t base, uint32_t slot_bytes,
                                  uint32_t num_sms) {
  kernels::HtRingArea a{};
  if (request.slots == 0) return a;
  if (topo.nodes() > 1) {
    fail(EPC_ERR_UNSUPPORTED,
         format("EPCOMM_HT_RING_SLOTS is %u, but the rings serve groups of one node, and this group spans %d nodes "
                "(unset it, or set virtual_node_size to 0)",
                request.slots, topo.nodes()));
  }
  if (topo.node_size > kHtRingMaxNodeSize) {
    fail(EPC_ERR_UNSUPPORTED, format("EPCOMM_HT_RING_SLOTS is %u, but the rings serve nodes of at most %d ranks (a "
                                     "lane of a warp holds each ring's end), and this node has %d",
                                     request.slots, kHtRingMaxNodeSize, topo.node_size));
  }
  a.base = base;
  a.node_size = static_cast<uint32_t>(topo.node_size);
  a.channels = request.channels != 0 ? request.channels : ring_channels_served(num_sms, topo.node_size);
  a.capacity = request.slots;
  a.slot_bytes = kernels::ht_ring_slot_bytes(slot_bytes);
  return a;
}

void check_ht_rings_served(const kernels::HtRingArea& rings, bool packed, bool send_only, const RingLaunch& l) {
  if (rings.capacity == 0) return;
  if (packed) {
    fail_unsupported(
        format("%s: EPCOMM_HT_RING_SLOTS is set, and the rings serve handles of EPC_LAYOUT_FLAT only; "
               "unset it",
               l.call));
  }
  if (send_only) {
    fail_unsupported(
        format("%s: EPC_STEP_SEND_ONLY is not served while EPCOMM_HT_RING_SLOTS is set (the rings' "
               "readers run in the sending launch); call it without the flag",
               l.call));
  }
  if (l.blocks > l.fused_blocks) {
    fail_unsupported(
        format("%s: EPCOMM_HT_RING_SLOTS is set, and the rings run as one launch, of at most %d blocks "
               "on this GPU; this one asks for %d (lower send_sms or EpcGroupConfig.num_sms)",
               l.call, l.fused_blocks, l.blocks));
  }
  const int64_t senders = int64_t{l.blocks} * l.send_warps, receivers = int64_t{l.blocks} * l.receive_warps;
  if (l.writers > senders || l.readers > receivers) {
    fail_argument(
        format("%s: EPCOMM_HT_RING_CHANNELS is %u, and its rings need %lld sending and %lld receiving "
               "warps; %d blocks have %lld and %lld (use fewer channels or more blocks)",
               l.call, rings.channels, static_cast<long long>(l.writers), static_cast<long long>(l.readers), l.blocks,
               static_cast<long long>(senders), static_cast<long long>(receivers)));
  }
}

}  // namespace epc
