// SPDX-License-Identifier: Apache-2.0
// A credit ring (kernels/ht/ht_ring.cuh) exercised on one GPU without NCCL: this rank is both
// ends of `rings` rings (one channel each), reached through a PeerTransport over plain device
// memory as a one-rank node. Writers in one block, readers in another: a warp per ring end
// (one active lane of HtRingLaneWriter / HtRingLaneReader), or one warp for every ring's end, a
// lane per ring (`lanes`, as HT's ring kernels hold them), each warp resting a seeded random
// number of cycles before every slot, so that the rings run full, empty and in between; the
// readers check each slot against what its writer must have put there and copy its payload
// out. Both ends signal every `batch` slots. Counters carry over from one launch to the next,
// as they do across steps and graph replays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/wire/device_error.hpp"

namespace epc::gputest::ring {

struct RingSelfConfig {
  int rings = 1;
  uint32_t capacity = 1;
  int items = 64;            // per ring and launch
  int payload_bytes = 1024;  // a multiple of 16
  int launches = 1;
  uint64_t seed = 1;
  int max_delay_cycles = 2000;
  bool lanes = false;   // one warp holds every ring's end, a lane per ring
  uint32_t batch = 1;   // slots an end lets pile up before it signals (1..capacity)
  bool writers = true;  // false: no writer runs (the readers must time out)
  bool readers = true;  // false: no reader runs (the writers must time out once the ring is full)
  uint64_t timeout_ns = 5'000'000'000ull;
};

struct RingSelfResult {
  std::string cuda_error;              // empty when every CUDA call succeeded
  uint32_t mismatches = 0;             // slots whose header or payload was not the writer's next item
  uint32_t overfull = 0;               // reads that saw more than `capacity` slots published and unread
  kernels::DeviceError error{};        // the first wait that gave up (status 0: none)
  std::vector<uint8_t> out;            // [rings][launches * items][payload_bytes], as the readers copied
  std::vector<uint64_t> tails, heads;  // each ring's counters after the last launch
};

// The payload's 32-bit word w of item `item` of ring `ring`, as writers write it.
constexpr uint32_t ring_payload_word(int ring, int item, int word) {
  uint32_t h = static_cast<uint32_t>(ring) * 0x9E3779B1u ^ static_cast<uint32_t>(item) * 0x85EBCA77u ^
               static_cast<uint32_t>(word) * 0xC2B2AE3Du;
  h ^= h >> 15;
  return h * 0x2C1B3C6Du;
}

RingSelfResult run_ring_self(const RingSelfConfig& config);

}  // namespace epc::gputest::ring
