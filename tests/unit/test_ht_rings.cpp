// SPDX-License-Identifier: Apache-2.0
// Dispatch over credit rings inside a node (core/ht/ht_rings.hpp, kernels/wire/ht_ring.hpp's
// HtRingArea): the environment variables that force them, where the planner puts them, that
// every word and slot of the area has a place of its own inside it, and the dispatches the
// rings refuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/ht/ht_rings.hpp"
#include "core/planner.hpp"
#include "tests/harness/scoped_env.hpp"
#include "tests/unit/group_config.hpp"

namespace {

using epc::test::group_config;

// The two variables, set for the object's lifetime (an empty value unsets one).
class Environment {
 public:
  Environment(const char* slots, const char* channels)
      : slots_("EPCOMM_HT_RING_SLOTS", slots), channels_("EPCOMM_HT_RING_CHANNELS", channels) {}

 private:
  epc::test::ScopedEnv slots_, channels_;
};

// The status and message `call` fails with: EPC_OK and "" when it returns.
struct Failure {
  EpcStatus status = EPC_OK;
  std::string message;
};
Failure failure_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const epc::Error& e) {
    return {e.status(), e.what()};
  }
  return {};
}

TEST(HtRingsEnvironment, UnsetMeansNoRings) {
  Environment env("", "");
  const epc::RingRequest r = epc::ht_rings_from_environment();
  EXPECT_EQ(r.slots, 0u);
  EXPECT_EQ(r.channels, 0u);  // what the grid serves
}

TEST(HtRingsEnvironment, ReadsSlotsAndChannels) {
  Environment env("3", "5");
  const epc::RingRequest r = epc::ht_rings_from_environment();
  EXPECT_EQ(r.slots, 3u);
  EXPECT_EQ(r.channels, 5u);
  Environment zero_channels("1", "0");
  EXPECT_EQ(epc::ht_rings_from_environment().channels, 0u);
}

TEST(HtRingsEnvironment, RefusesWhatIsNotACountInRange) {
  for (const char* bad : {"x", "-1", "+2", "2x", "65", "99999999999999999999", " 2"}) {
    Environment env(bad, "");
    EXPECT_EQ(failure_of([] { epc::ht_rings_from_environment(); }).status, EPC_ERR_INVALID_ARGUMENT) << bad;
  }
  Environment env("1", "1025");
  const Failure f = failure_of([] { epc::ht_rings_from_environment(); });
  EXPECT_EQ(f.status, EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(f.message.find("EPCOMM_HT_RING_CHANNELS is '1025'"), std::string::npos) << f.message;
}

// Every counter word and slot byte of the area belongs to exactly one thing, inside bytes(),
// and slots start 16-byte aligned (their payload follows a 16-byte header).
TEST(HtRingArea, EveryWordAndSlotHasAPlaceOfItsOwn) {
  for (uint32_t S : {1u, 2u, 3u, 8u}) {
    for (uint32_t G : {1u, 2u, 3u}) {
      for (uint32_t C : {1u, 2u, 3u}) {
        const epc::kernels::HtRingArea a{4096, S, G, C, epc::kernels::ht_ring_slot_bytes(14400)};
        std::vector<std::pair<uint64_t, uint64_t>> spans;  // [begin, end)
        for (int i = 0; i < static_cast<int>(S); ++i) {
          for (int g = 0; g < static_cast<int>(G); ++g) {
            spans.push_back({a.tail_word(i, g), a.tail_word(i, g) + 8});
            spans.push_back({a.head_word(i, g), a.head_word(i, g) + 8});
            spans.push_back({a.writer_state(i, g), a.writer_state(i, g) + 16});
            spans.push_back({a.reader_state(i, g), a.reader_state(i, g) + 16});
            spans.push_back({a.slots(i, g), a.slots(i, g) + uint64_t{C} * a.slot_bytes});
            EXPECT_EQ(a.slots(i, g) % 16, 0u);
          }
        }
        std::sort(spans.begin(), spans.end());
        uint64_t used = 0;
        for (size_t k = 0; k < spans.size(); ++k) {
          EXPECT_GE(spans[k].first, a.base);
          EXPECT_LE(spans[k].second, a.base + a.bytes());
          if (k > 0) {
            EXPECT_LE(spans[k - 1].second, spans[k].first) << "overlap at " << spans[k].first;
          }
          used += spans[k].second - spans[k].first;
        }
        EXPECT_EQ(used, a.bytes()) << "S " << S << " G " << G << " C " << C;  // nothing unused
      }
    }
  }
}

TEST(HtRingPlan, DispatchRecvHoldsJustTheRings) {
  const epc::GroupConfig c = group_config(EPC_MODE_HIGH_THROUGHPUT, 64, 7168, 512, 8);
  const epc::Plan plain = epc::make_plan(c, {4, 4, 1});
  EXPECT_EQ(plain.ht_dispatch_rings.capacity, 0u);
  Environment env("3", "2");
  const epc::Plan p = epc::make_plan(c, {4, 4, 1});
  const epc::Region& recv = p.region(EPC_REGION_DISPATCH_RECV);
  EXPECT_EQ(p.ht_dispatch_rings.base, recv.offset);
  EXPECT_EQ(p.ht_dispatch_rings.node_size, 4u);
  EXPECT_EQ(p.ht_dispatch_rings.channels, 2u);
  EXPECT_EQ(p.ht_dispatch_rings.capacity, 3u);
  // A dispatch slot at hidden 7168, top-8 (ht_dispatch_slot): the payload area, a row of
  // 14336 and 2.0's 56 fp32 scales (224), 14560; top-k ids and weights, 32 bytes each: 14624.
  // A ring slot adds the 16-byte header.
  EXPECT_EQ(p.ht_dispatch_rings.slot_bytes, 14640u);
  // 4 ranks x 2 channels = 8 rings: 6 * 8 * 8 = 384 bytes of words, 8 * 3 slots; the region
  // rounds up to 256.
  const uint64_t bytes = 384u + 24u * 14640u;
  EXPECT_EQ(p.ht_dispatch_rings.bytes(), bytes);
  EXPECT_EQ(recv.size, (bytes + 255) / 256 * 256);
  // In place of 4 * 512 slots of 14624 bytes.
  EXPECT_EQ(plain.region(EPC_REGION_DISPATCH_RECV).size, 4u * 512u * 14624u);
  EXPECT_LT(p.symmetric_bytes, plain.symmetric_bytes);
}

// Without EPCOMM_HT_RING_CHANNELS a node gets the channels its grid serves: 16 warps of each
// role per block, one per channel and rank of the node.
TEST(HtRingPlan, ChannelsDefaultToWhatTheGridServes) {
  EXPECT_EQ(epc::ring_channels_served(24, 1), 384u);
  EXPECT_EQ(epc::ring_channels_served(24, 8), 48u);
  EXPECT_EQ(epc::ring_channels_served(24, 7), 54u);
  EXPECT_EQ(epc::ring_channels_served(1, 32), 1u);       // at least one
  EXPECT_EQ(epc::ring_channels_served(1024, 1), 1024u);  // at most kMaxRingChannels
  Environment env("2", "");
  epc::GroupConfig c = group_config(EPC_MODE_HIGH_THROUGHPUT, 64, 7168, 512, 8);
  EXPECT_EQ(epc::make_plan(c, {8, 8, 1}).ht_dispatch_rings.channels, 48u);  // the default 24 SMs
  c.num_sms = 6;
  const epc::Plan p = epc::make_plan(c, {4, 4, 1});
  EXPECT_EQ(p.ht_dispatch_rings.channels, 24u);
  EXPECT_EQ(p.ht_combine_rings.channels, 24u);
}

TEST(HtRingPlan, RefusesGroupsOfSeveralNodesAndNodesOverAWarp) {
  const epc::GroupConfig c = group_config(EPC_MODE_HIGH_THROUGHPUT, 64, 7168, 512, 8);
  Environment env("1", "1");
  const Failure nodes = failure_of([&] { epc::make_plan(c, {4, 2, 2}); });
  EXPECT_EQ(nodes.status, EPC_ERR_UNSUPPORTED);
  EXPECT_NE(nodes.message.find("EPCOMM_HT_RING_SLOTS"), std::string::npos) << nodes.message;
  // A writer warp has a lane per reader: nodes of at most 32 ranks.
  const epc::GroupConfig wide_config = group_config(EPC_MODE_HIGH_THROUGHPUT, 64, 2048, 64, 8);
  const Failure wide = failure_of([&] { epc::make_plan(wide_config, {64, 64, 1}); });
  EXPECT_EQ(wide.status, EPC_ERR_UNSUPPORTED);
  EXPECT_NE(wide.message.find("at most 32 ranks"), std::string::npos) << wide.message;
  EXPECT_EQ(failure_of([&] { epc::make_plan(wide_config, {32, 32, 1}); }).status, EPC_OK);
}

// With rings the window holds no [R][T] slots: from 4096 to 16384 tokens it grows only by
// the chunk flags and the layout (within 5% here), where the slots' window grows 4x.
TEST(HtRingPlan, TheWindowNoLongerGrowsWithTheTokens) {
  auto window = [](uint32_t tokens) {
    return epc::make_plan(group_config(EPC_MODE_HIGH_THROUGHPUT, 256, 7168, tokens, 8), {8, 8, 1}).symmetric_bytes;
  };
  const uint64_t slots_4k = window(4096), slots_16k = window(16384);
  Environment env("4", "64");
  const uint64_t rings_4k = window(4096), rings_16k = window(16384);
  EXPECT_GT(slots_16k, 3 * slots_4k);
  EXPECT_LT(rings_16k, rings_4k + rings_4k / 20);
  EXPECT_LT(rings_4k * 5, slots_4k);
}

TEST(HtRingPlan, LowLatencyGroupsIgnoreThem) {
  Environment env("2", "2");
  const epc::Plan p = epc::make_plan(group_config(EPC_MODE_LOW_LATENCY, 64, 7168, 128, 8), {4, 2, 2});
  EXPECT_EQ(p.ht_dispatch_rings.capacity, 0u);
}

TEST(HtRingsServed, RefusesWhatTheRingsCannotRun) {
  const epc::kernels::HtRingArea none{};
  const epc::kernels::HtRingArea rings{256, 4, 2, 1, 1024};
  // 16 sending and 16 receiving warps per block; `writers` and `readers` the warps the rings need.
  auto failure = [](const epc::kernels::HtRingArea& a, bool packed, bool send_only, int blocks, int fused,
                    int64_t writers, int64_t readers) {
    return failure_of([&] {
      epc::check_ht_rings_served(a, packed, send_only, {"epc_combine", blocks, fused, 16, 16, writers, readers});
    });
  };
  auto status = [&](auto... args) { return failure(args...).status; };
  EXPECT_EQ(status(none, true, true, 500, 1, 9999, 9999), EPC_OK);  // no rings: nothing to check
  EXPECT_EQ(status(rings, false, false, 24, 132, 8, 2), EPC_OK);
  EXPECT_EQ(status(rings, true, false, 24, 132, 8, 2), EPC_ERR_UNSUPPORTED);
  EXPECT_EQ(status(rings, false, true, 24, 132, 8, 2), EPC_ERR_UNSUPPORTED);
  EXPECT_EQ(status(rings, false, false, 133, 132, 8, 2), EPC_ERR_UNSUPPORTED);
  // One block: 16 warps in each role.
  EXPECT_EQ(status(rings, false, false, 1, 132, 16, 16), EPC_OK);
  EXPECT_EQ(status(rings, false, false, 1, 132, 17, 16), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status(rings, false, false, 1, 132, 16, 17), EPC_ERR_INVALID_ARGUMENT);
  const Failure f = failure(rings, false, false, 2, 132, 40, 2);
  EXPECT_NE(f.message.find("epc_combine: EPCOMM_HT_RING_CHANNELS is 2"), std::string::npos) << f.message;
}

TEST(HtRingPlan, CombineRecvHoldsJustTheRings) {
  const epc::GroupConfig c = group_config(EPC_MODE_HIGH_THROUGHPUT, 64, 7168, 512, 8);
  const epc::Plan plain = epc::make_plan(c, {4, 4, 1});
  Environment env("2", "3");
  const epc::Plan p = epc::make_plan(c, {4, 4, 1});
  const epc::Region& recv = p.region(EPC_REGION_COMBINE_RECV);
  EXPECT_EQ(p.ht_combine_rings.base, recv.offset);
  EXPECT_EQ(p.ht_combine_rings.capacity, 2u);
  EXPECT_EQ(p.ht_combine_rings.channels, 3u);
  // A combine slot: a bf16 row (14336) and top-8 fp32 weights (32); the ring slot's header.
  EXPECT_EQ(p.ht_combine_rings.slot_bytes, 14336u + 32u + 16u);
  EXPECT_EQ(recv.size, (p.ht_combine_rings.bytes() + 255) / 256 * 256);
  // Handles hold each received row's token for combine: R * T int32 more.
  EXPECT_EQ(p.handle_bytes, plain.handle_bytes + 4u * 512u * 4u);
}

}  // namespace
