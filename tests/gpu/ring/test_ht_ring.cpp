// SPDX-License-Identifier: Apache-2.0
// The credit ring's device ends (kernels/ht/ht_ring.cuh) on one GPU: every slot a reader
// takes is the next one its writer published, bit for bit, for ring capacities 1 to 3 and
// 1 to 3 channels, writers and readers resting at random; counters carry over launches; a
// missing reader or writer ends in a timeout that names the ring phase and the rank waited
// for, instead of a hang. The CPU model (tests/unit/ht_ring_model.hpp) proves the protocol;
// this proves the kernels' ends keep it on a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
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
         std::to_string(c.items) + " items x " + std::to_string(c.launches) + " launch(es), seed " +
         std::to_string(c.seed);
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
      const RingSelfResult got = run_ring_self(c);
      ASSERT_EQ(got.cuda_error, "") << label(c);
      EXPECT_EQ(got.error.status, 0u) << label(c) << ": a wait gave up in phase "
                                      << kernels::phase_name(got.error.phase);
      EXPECT_EQ(got.mismatches, 0u) << label(c) << ": a reader took a slot that was not its writer's next item";
      EXPECT_EQ(got.overfull, 0u) << label(c) << ": more slots were published than the ring holds";
      EXPECT_TRUE(got.out == expected_out(c)) << label(c) << ": the copied payloads differ from what was written";
      for (int r = 0; r < rings; ++r) {
        EXPECT_EQ(got.tails[r], 300u) << label(c) << ", ring " << r;
        EXPECT_EQ(got.heads[r], 300u) << label(c) << ", ring " << r;
      }
    }
  }
}

// Steps and graph replays never reset the counters: five launches keep counting, and the
// slot index wraps at a point that differs per launch.
TEST(HtRing, CountersCarryOverLaunches) {
  RingSelfConfig c;
  c.rings = 2;
  c.capacity = 3;
  c.items = 7;
  c.launches = 5;
  c.payload_bytes = 256;
  c.max_delay_cycles = 4000;
  c.seed = 77;
  const RingSelfResult got = run_ring_self(c);
  ASSERT_EQ(got.cuda_error, "") << label(c);
  EXPECT_EQ(got.error.status, 0u) << label(c);
  EXPECT_EQ(got.mismatches, 0u) << label(c);
  EXPECT_EQ(got.overfull, 0u) << label(c);
  EXPECT_TRUE(got.out == expected_out(c)) << label(c);
  EXPECT_EQ(got.tails, (std::vector<uint64_t>{35, 35}));
  EXPECT_EQ(got.heads, (std::vector<uint64_t>{35, 35}));
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

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    cudaGetLastError();
    std::printf("SKIP: no CUDA GPU visible; epcomm-ring-tests needs one\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
