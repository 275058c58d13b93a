// SPDX-License-Identifier: Apache-2.0
#include "tests/gpu/ring/ring_self_run.hpp"

#include <cuda_runtime.h>

#include <cstring>

#include "kernels/ht/ht_ring.cuh"

namespace epc::gputest::ring {
namespace {

using kernels::HtRingHeader;
using kernels::HtRingLaneReader;
using kernels::HtRingLaneWriter;
using kernels::HtRingPlace;
using kernels::PeerTransport;
using kernels::RingWait;

constexpr int kMaxRings = 8;
constexpr uint64_t kWordStride = 128;  // each counter word on a line of its own

// What each ring's ends keep between launches, in the order their restore() and save() read
// and write them (HtRingArea's writer_state and reader_state).
struct RingCounters {
  uint64_t tail, head_seen;  // writer
  uint64_t head, tail_seen;  // reader
};

struct RingSelfParams {
  PeerTransport transport;
  HtRingPlace places[kMaxRings];
  int rings;
  int items;
  int first_item;
  int payload_bytes;
  int max_delay_cycles;
  uint64_t seed;
  bool lanes;      // one warp, a lane per ring; else a warp per ring
  uint64_t batch;  // slots an end lets pile up before it signals the other
  bool writers, readers;
  RingWait space_wait, data_wait;
  RingCounters* counters;
  char* out;  // [rings][total_items][payload_bytes]
  int total_items;
  uint32_t* mismatches;
  uint32_t* overfull;
};

// Rests a random number of cycles (the same in every lane: the warp's generator).
__device__ void rest(uint64_t& state, int max_cycles) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  if (max_cycles <= 0) return;
  const long long until = clock64() + static_cast<long long>((state >> 33) % static_cast<uint64_t>(max_cycles));
  while (clock64() < until) {
  }
}

// The 32 lanes' rings: lane k holds ring first + k when k < count.
struct WarpRings {
  int first, count;
  __device__ bool has(int lane) const { return lane < count; }
};

// Writes every item of the warp's rings, the same item into each of them at once (as HT
// dispatch's sending warp copies a token to every reader), signalling every p.batch slots.
__device__ void write_rings(const RingSelfParams& p, WarpRings rings) {
  const PeerTransport& t = p.transport;
  const int lane = kernels::lane_id();
  HtRingLaneWriter w{};
  w.active = rings.has(lane);
  if (w.active) {
    w.place = p.places[rings.first + lane];
    w.restore(&p.counters[rings.first + lane].tail);
  }
  uint64_t random = p.seed ^ (0x100000001b3ull * (2 * rings.first + 1));
  for (int i = p.first_item; i < p.first_item + p.items; ++i) {
    rest(random, p.max_delay_cycles);
    if (!w.wait_space(t, w.active, p.space_wait)) return;
    const uintptr_t slot = w.active ? reinterpret_cast<uintptr_t>(w.slot(t)) : 0;
    for (int k = 0; k < rings.count; ++k) {
      const int r = rings.first + k;
      char* ring_slot = reinterpret_cast<char*>(__shfl_sync(0xffffffffu, slot, k));
      if (lane == 0) *reinterpret_cast<HtRingHeader*>(ring_slot) = HtRingHeader{0, i, i, r};
      uint32_t* payload = reinterpret_cast<uint32_t*>(ring_slot + sizeof(HtRingHeader));
      for (int word = lane; word < p.payload_bytes / 4; word += kernels::kWarpSize) {
        payload[word] = ring_payload_word(r, i, word);
      }
    }
    if (w.active) ++w.tail;
    if (__any_sync(0xffffffffu, w.active && w.tail - w.published >= p.batch)) w.publish(t);
  }
  w.publish(t);
  if (w.active) w.save(&p.counters[rings.first + lane].tail);
}

// Reads every item of the warp's rings, one from each at once (as HT combine's receiving warp
// takes a token's rows), checking each slot and copying its payload out, crediting every
// p.batch slots.
__device__ void read_rings(const RingSelfParams& p, WarpRings rings) {
  const PeerTransport& t = p.transport;
  const int lane = kernels::lane_id();
  HtRingLaneReader rd{};
  rd.active = rings.has(lane);
  if (rd.active) {
    rd.place = p.places[rings.first + lane];
    rd.restore(&p.counters[rings.first + lane].head);
  }
  uint64_t random = p.seed ^ (0x100000001b3ull * (2 * rings.first + 2));
  for (int i = p.first_item; i < p.first_item + p.items; ++i) {
    rest(random, p.max_delay_cycles);
    if (!rd.wait_data(t, rd.active, p.data_wait)) return;
    // More published and unread than the ring holds would mean a writer overwrote a slot.
    if (rd.active && rd.tail_seen - rd.head > rd.place.capacity) atomicAdd(p.overfull, 1u);
    const uintptr_t slot = rd.active ? reinterpret_cast<uintptr_t>(rd.slot(t)) : 0;
    for (int k = 0; k < rings.count; ++k) {
      const int r = rings.first + k;
      const char* ring_slot = reinterpret_cast<const char*>(__shfl_sync(0xffffffffu, slot, k));
      const HtRingHeader h = *reinterpret_cast<const HtRingHeader*>(ring_slot);
      bool wrong = h.source != 0 || h.row != i || h.token != i || h.node != r;
      const uint32_t* payload = reinterpret_cast<const uint32_t*>(ring_slot + sizeof(HtRingHeader));
      uint32_t* out =
          reinterpret_cast<uint32_t*>(p.out + (static_cast<size_t>(r) * p.total_items + i) * p.payload_bytes);
      for (int word = lane; word < p.payload_bytes / 4; word += kernels::kWarpSize) {
        const uint32_t v = payload[word];
        wrong |= v != ring_payload_word(r, i, word);
        out[word] = v;
      }
      if (__any_sync(0xffffffffu, wrong) && lane == 0) atomicAdd(p.mismatches, 1u);
    }
    if (rd.active) ++rd.head;
    if (__any_sync(0xffffffffu, rd.active && rd.head - rd.credited >= p.batch)) rd.give_credit(t);
  }
  rd.give_credit(t);
  if (rd.active) rd.save(&p.counters[rings.first + lane].head);
}

// Block 0 writes, block 1 reads: warp r ring r, or warp 0 every ring (p.lanes).
__global__ void ring_self_kernel(RingSelfParams p) {
  const int warp = static_cast<int>(threadIdx.x) / kernels::kWarpSize;
  WarpRings rings{warp, 1};
  if (p.lanes) {
    if (warp != 0) return;
    rings = WarpRings{0, p.rings};
  } else if (warp >= p.rings) {
    return;
  }
  if (blockIdx.x == 0 && p.writers) write_rings(p, rings);
  if (blockIdx.x == 1 && p.readers) read_rings(p, rings);
}

// Device memory freed when it goes out of scope.
struct DeviceBytes {
  void* ptr = nullptr;
  ~DeviceBytes() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  cudaError_t allocate(size_t bytes) {
    const cudaError_t e = cudaMalloc(&ptr, bytes);
    return e != cudaSuccess ? e : cudaMemset(ptr, 0, bytes);
  }
};

std::string describe(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

}  // namespace

RingSelfResult run_ring_self(const RingSelfConfig& c) {
  RingSelfResult result;
  if (c.rings < 1 || c.rings > kMaxRings || c.capacity < 1 || c.items < 0 || c.payload_bytes % 16 != 0 ||
      c.launches < 1 || c.batch < 1 || c.batch > c.capacity) {
    result.cuda_error = "run_ring_self: bad configuration";
    return result;
  }
  const uint64_t slot_bytes = sizeof(HtRingHeader) + static_cast<uint64_t>(c.payload_bytes);
  const uint64_t slots_bytes = static_cast<uint64_t>(c.rings) * c.capacity * slot_bytes;
  const uint64_t words_at = (slots_bytes + kWordStride - 1) / kWordStride * kWordStride;
  const uint64_t window_bytes = words_at + 2ull * c.rings * kWordStride;
  const int total_items = c.items * c.launches;
  const size_t out_bytes = static_cast<size_t>(c.rings) * total_items * c.payload_bytes;

  DeviceBytes window, counters, out, flags, error, claim;
  cudaError_t e = cudaSuccess;
  if ((e = window.allocate(window_bytes)) != cudaSuccess || (e = counters.allocate(sizeof(RingCounters) * c.rings)) ||
      (e = out.allocate(out_bytes > 0 ? out_bytes : 16)) || (e = flags.allocate(2 * sizeof(uint32_t))) ||
      (e = error.allocate(sizeof(kernels::DeviceError))) || (e = claim.allocate(sizeof(uint32_t)))) {
    result.cuda_error = describe("allocating the ring test's memory", e);
    return result;
  }
  kernels::DeviceError error_init{};
  error_init.claim = static_cast<uint32_t*>(claim.ptr);
  if ((e = cudaMemcpy(error.ptr, &error_init, sizeof error_init, cudaMemcpyHostToDevice)) != cudaSuccess) {
    result.cuda_error = describe("initialising the error record", e);
    return result;
  }

  RingSelfParams p{};
  const uint64_t base = reinterpret_cast<uint64_t>(window.ptr);
  // One rank, one node: every peer (itself) reached by direct stores into its window.
  p.transport.node_base = base;
  p.transport.node_stride = 0;
  p.transport.local_base = base;
  p.transport.node_begin = 0;
  p.transport.node_size = 1;
  p.transport.one_node = true;
  for (int r = 0; r < c.rings; ++r) {
    HtRingPlace& place = p.places[r];
    place.slots = static_cast<uint64_t>(r) * c.capacity * slot_bytes;
    place.tail_word = words_at + static_cast<uint64_t>(2 * r) * kWordStride;
    place.head_word = words_at + static_cast<uint64_t>(2 * r + 1) * kWordStride;
    place.slot_bytes = static_cast<uint32_t>(slot_bytes);
    place.capacity = c.capacity;
    place.writer = 0;
    place.reader = 0;
  }
  p.rings = c.rings;
  p.items = c.items;
  p.payload_bytes = c.payload_bytes;
  p.max_delay_cycles = c.max_delay_cycles;
  p.lanes = c.lanes;
  p.batch = c.batch;
  p.writers = c.writers;
  p.readers = c.readers;
  auto* error_record = static_cast<kernels::DeviceError*>(error.ptr);
  p.space_wait = RingWait{c.timeout_ns, error_record, kernels::kPhaseHtRingSpace};
  p.data_wait = RingWait{c.timeout_ns, error_record, kernels::kPhaseHtRingData};
  p.counters = static_cast<RingCounters*>(counters.ptr);
  p.out = static_cast<char*>(out.ptr);
  p.total_items = total_items;
  p.mismatches = static_cast<uint32_t*>(flags.ptr);
  p.overfull = p.mismatches + 1;
  for (int launch = 0; launch < c.launches; ++launch) {
    p.first_item = launch * c.items;
    p.seed = c.seed * 1000003ull + static_cast<uint64_t>(launch);
    ring_self_kernel<<<2, c.rings * kernels::kWarpSize>>>(p);
    if ((e = cudaGetLastError()) != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess) {
      result.cuda_error = describe("running the ring kernel", e);
      return result;
    }
  }
  uint32_t found[2];
  std::vector<RingCounters> ends(static_cast<size_t>(c.rings));
  result.out.resize(out_bytes);
  if ((e = cudaMemcpy(found, flags.ptr, sizeof found, cudaMemcpyDeviceToHost)) != cudaSuccess ||
      (e = cudaMemcpy(&result.error, error.ptr, sizeof result.error, cudaMemcpyDeviceToHost)) != cudaSuccess ||
      (e = cudaMemcpy(ends.data(), counters.ptr, sizeof(RingCounters) * ends.size(), cudaMemcpyDeviceToHost)) !=
          cudaSuccess ||
      (e = cudaMemcpy(result.out.data(), out.ptr, out_bytes, cudaMemcpyDeviceToHost)) != cudaSuccess) {
    result.cuda_error = describe("reading the ring test's results back", e);
    return result;
  }
  result.mismatches = found[0];
  result.overfull = found[1];
  result.error.claim = nullptr;
  for (const RingCounters& end : ends) {
    result.tails.push_back(end.tail);
    result.heads.push_back(end.head);
  }
  return result;
}

}  // namespace epc::gputest::ring
