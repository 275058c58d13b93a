// SPDX-License-Identifier: Apache-2.0
// The credit ring's device ends (kernels/ht/ht_ring.cuh) on one GPU: every slot a reader
// takes is the next one its writer published, bit for bit, for ring capacities 1 to 3 and
// 1 to 3 channels, a warp per ring end, and for capacities 1 to 4 with one warp holding up to
// 8 rings' ends and signalling in batches, writers and readers resting at random; counters
// carry over launches; a
// missing reader or writer ends in a timeout that names the ring phase and the rank waited
// for, instead of a hang. The CPU model (tests/unit/ht_ring_model.hpp) proves the protocol;
// this proves the kernels' ends keep it on a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "epcomm/epcomm.h"
#include "tests/gpu/ring/ring_self_run.hpp"

namespace epc::gputest::ring {
namespace {

// The out array the readers must have written: every item of every ring, as its writer made it.
std::vector<uint8_t> expected_out(const RingSelfConfig& c) {
  const int total = c.items * c.launches, words = c.payload_bytes / 4;
  std::vector<uint8_t> out(static_cast<size_t>(c.rings) * total * c.payload_bytes);
  for (int r = 0; r < c.rings; ++r) {
    for (int i = 0; i < total; ++i) {
      for (int w = 0; w < words; ++w) {
        const uint32_t v = ring_payload_word(r, i, w);
        std::memcpy(&out[((static_cast<size_t>(r) * total + i) * words + w) * 4], &v, 4);
      }
    }
  }
  return out;
}

std::string label(const RingSelfConfig& c) {
  return std::to_string(c.rings) + " ring(s) of capacity " + std::to_string(c.capacity) + ", " +
         std::to_string(c.items) + " items x " + std::to_string(c.launches) + " launch(es), " +
         (c.lanes ? "a lane per ring" : "a warp per ring") + ", signals every " + std::to_string(c.batch) +
         " slot(s), seed " + std::to_string(c.seed);
}

// Runs `c` and checks that every ring carried every item, in order, bit for bit.
void expect_every_item(const RingSelfConfig& c) {
  const RingSelfResult got = run_ring_self(c);
  ASSERT_EQ(got.cuda_error, "") << label(c);
  EXPECT_EQ(got.error.status, 0u) << label(c) << ": a wait gave up in phase " << kernels::phase_name(got.error.phase);
  EXPECT_EQ(got.mismatches, 0u) << label(c) << ": a reader took a slot that was not its writer's next item";
  EXPECT_EQ(got.overfull, 0u) << label(c) << ": more slots were published than the ring holds";
  EXPECT_TRUE(got.out == expected_out(c)) << label(c) << ": the copied payloads differ from what was written";
  const uint64_t total = static_cast<uint64_t>(c.items) * c.launches;
  for (int r = 0; r < c.rings; ++r) {
    EXPECT_EQ(got.tails[r], total) << label(c) << ", ring " << r;
    EXPECT_EQ(got.heads[r], total) << label(c) << ", ring " << r;
  }
}

TEST(HtRing, EverySlotArrivesOnceInOrderAtEveryCapacity) {
  for (uint32_t capacity : {1u, 2u, 3u}) {
    for (int rings : {1, 2, 3}) {
      RingSelfConfig c;
      c.rings = rings;
      c.capacity = capacity;
      c.items = 300;
      c.payload_bytes = 1024;
      c.seed = 100 * capacity + rings;
      expect_every_item(c);
    }
  }
}

// One warp holds every ring's end, a lane per ring, and both ends signal once per `batch`
// slots, as HT's ring kernels do (a writer publishes, a reader credits, before it waits).
TEST(HtRing, AWarpOfRingEndsBatchingItsSignalsLosesNothing) {
  for (uint32_t capacity : {1u, 2u, 3u, 4u}) {
    for (uint32_t batch : {1u, capacity > 1 ? capacity / 2 : 1u, capacity}) {
      for (int rings : {2, 5, 8}) {
        RingSelfConfig c;
        c.rings = rings;
        c.capacity = capacity;
        c.batch = batch;
        c.lanes = true;
        c.items = 200;
        c.payload_bytes = 512;
        c.seed = 1000 * capacity + 10 * batch + rings;
        expect_every_item(c);
      }
    }
  }
}

// Steps and graph replays never reset the counters: five launches keep counting, and the
// slot index wraps at a point that differs per launch.
TEST(HtRing, CountersCarryOverLaunches) {
  for (bool lanes : {false, true}) {
    RingSelfConfig c;
    c.rings = 2;
    c.capacity = 3;
    c.items = 7;
    c.launches = 5;
    c.payload_bytes = 256;
    c.max_delay_cycles = 4000;
    c.lanes = lanes;
    c.batch = lanes ? 2 : 1;
    c.seed = 77;
    expect_every_item(c);
  }
}

// A ring with one end missing: the other end's wait gives up after the timeout, naming the
// ring phase and this rank (both ends are rank 0), instead of hanging.
void expect_timeout(RingSelfConfig c, uint32_t phase) {
  c.max_delay_cycles = 0;
  c.timeout_ns = 20'000'000;
  const RingSelfResult got = run_ring_self(c);
  ASSERT_EQ(got.cuda_error, "");
  EXPECT_EQ(got.error.status, static_cast<uint32_t>(EPC_ERR_TIMEOUT));
  EXPECT_EQ(got.error.phase, phase) << kernels::phase_name(got.error.phase);
  EXPECT_EQ(got.error.rank, 0);
  EXPECT_EQ(got.error.peer, 0);
  EXPECT_GE(got.error.waited_ns, c.timeout_ns);
}

// Nobody reads: the writer fills its 2 slots and times out waiting for the third's credit.
TEST(HtRing, MissingReaderTimesOutNamingTheRingSpace) {
  RingSelfConfig c;
  c.capacity = 2;
  c.items = 5;
  c.readers = false;
  expect_timeout(c, kernels::kPhaseHtRingSpace);
}

// Nobody writes: the reader times out waiting for the first slot.
TEST(HtRing, MissingWriterTimesOutNamingTheRingData) {
  RingSelfConfig c;
  c.capacity = 3;
  c.items = 1;
  c.writers = false;
  expect_timeout(c, kernels::kPhaseHtRingData);
}

}  // namespace
}  // namespace epc::gputest::ring
