// SPDX-License-Identifier: Apache-2.0
// A credit ring's two ends on PeerTransport (issue 27, step C; the arithmetic and the slot
// header are kernels/wire/ht_ring.hpp's, which the CPU model tests/unit/ht_ring_model.hpp
// runs). A warp holds the ends of up to kWarpSize rings, one per lane (a warp with one ring
// makes one lane active): the writer fills slot `tail` and raises the reader's tail word; the
// reader copies the slot out and raises the writer's head word (the credit). Both words only
// grow and are read "at least", so they are never reset: later steps and graph replays keep
// counting where the last one stopped, and each end keeps its own counter in registers (or in
// the caller's state between launches).
//
// Every wait is bounded by the group's timeout and names the phase and the rank waited for
// (peer_wait.cuh). An end never waits while it holds back what the other end needs (a writer
// publishes, a reader gives its credits, before either waits), the rule that keeps the rings
// deadlock-free (ht_ring.hpp).
#pragma once

#include <cstdint>

#include "kernels/device/signal_wait.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ht_ring.hpp"

namespace epc::kernels {

// Where one ring (writer, reader, channel) lives: its slots and tail word in the reader's
// window, its head word in the writer's.
struct HtRingPlace {
  uint64_t slots;      // reader's window: slot i at slots + i * slot_bytes
  uint64_t tail_word;  // reader's window: slots written, signalled by the writer
  uint64_t head_word;  // writer's window: slots consumed, signalled by the reader
  uint32_t slot_bytes;
  uint32_t capacity;
  int32_t writer;
  int32_t reader;

  __device__ __forceinline__ uint64_t slot(uint64_t counter) const {
    return slots + ht_ring_index(counter, capacity) * slot_bytes;
  }
};

// What a timed-out ring wait reports.
struct RingWait {
  uint64_t timeout_ns;
  DeviceError* error;
  uint32_t phase;
};

// The writer ends of up to kWarpSize rings inside a node, one per lane, for a warp that
// writes one item to several readers at once (the same copy fills every lane's slot). Each
// lane holds its ring's counters; `published` is the tail its reader was last given, so a
// lane may write several slots before one signal (publish). A lane never waits for space
// while holding slots it has not published (wait_space publishes first), so its reader always
// has what it needs to go on.
struct HtRingLaneWriter {
  HtRingPlace place;  // this lane's ring (unused where `active` is false)
  bool active;
  uint64_t tail;
  uint64_t head_seen;
  uint64_t published;

  // This lane's counters as the owner's window keeps them between launches
  // (HtRingArea::writer_state): restored at a warp's start, saved at its end.
  __device__ __forceinline__ void restore(const uint64_t* saved) {
    tail = __ldcg(saved);
    head_seen = __ldcg(saved + 1);
    published = tail;
  }
  __device__ __forceinline__ void save(uint64_t* saved) const {
    __stcg(saved, tail);
    __stcg(saved + 1, head_seen);
  }

  __device__ __forceinline__ bool has_space() const { return ht_ring_has_space(tail, head_seen, place.capacity); }

  // Every lane: the lanes with `need` wait until their slot `tail` may be written. First
  // publishes what the warp wrote, when any of them must read its reader's head. Every lane
  // returns the warp's outcome.
  __device__ __forceinline__ bool wait_space(const PeerTransport& t, bool need, const RingWait& w) {
    const bool lacking = need && !has_space();
    if (!__any_sync(0xffffffffu, lacking)) return true;
    publish(t);
    bool ok = true;
    if (lacking) {
      ok = wait_for_signal(
          t, place.head_word, place.reader,
          [this](uint64_t head) { return ht_ring_has_space(tail, head, place.capacity); }, &head_seen, w.timeout_ns,
          w.error, w.phase, place.writer, place.reader);
    }
    return __all_sync(0xffffffffu, ok);
  }

  // This lane's slot `tail` (the reader's memory: rings inside a node only).
  __device__ __forceinline__ char* slot(const PeerTransport& t) const {
    return static_cast<char*>(t.buffer(place.slot(tail), place.reader));
  }

  // Every lane, after the warp's stores of every slot written so far: each lane with slots
  // its reader was not given raises the reader's tail.
  __device__ __forceinline__ void publish(const PeerTransport& t) {
    __syncwarp();  // every lane's stores into the slots before the signals
    if (active && published < tail) {
      t.signal(place.tail_word, place.reader, tail);
      published = tail;
    }
  }
};

// The reader ends of up to kWarpSize rings, one per lane, for a warp that takes one item from
// several rings at once. `credited` is the head its writer was last given, so a lane may
// consume several slots before one credit (give_credit). A lane never waits for data while
// holding credits back (wait_data gives them first), so its writer always has room to go on.
struct HtRingLaneReader {
  HtRingPlace place;  // this lane's ring (unused where `active` is false)
  bool active;
  uint64_t head;
  uint64_t tail_seen;
  uint64_t credited;

  // This lane's counters as the owner's window keeps them between launches
  // (HtRingArea::reader_state): restored at a warp's start, saved at its end.
  __device__ __forceinline__ void restore(const uint64_t* saved) {
    head = __ldcg(saved);
    tail_seen = __ldcg(saved + 1);
    credited = head;
  }
  __device__ __forceinline__ void save(uint64_t* saved) const {
    __stcg(saved, head);
    __stcg(saved + 1, tail_seen);
  }

  __device__ __forceinline__ bool has_data() const { return ht_ring_has_data(tail_seen, head); }

  // Every lane: the lanes with `need` wait until their slot `head` is published. First gives
  // the credits the warp holds, when any of them must read its writer's tail. Every lane
  // returns the warp's outcome.
  __device__ __forceinline__ bool wait_data(const PeerTransport& t, bool need, const RingWait& w) {
    const bool lacking = need && !has_data();
    if (!__any_sync(0xffffffffu, lacking)) return true;
    give_credit(t);
    bool ok = true;
    if (lacking) {
      ok = wait_for_signal(
          t, place.tail_word, place.writer, [this](uint64_t tail) { return ht_ring_has_data(tail, head); }, &tail_seen,
          w.timeout_ns, w.error, w.phase, place.reader, place.writer);
    }
    return __all_sync(0xffffffffu, ok);
  }

  // This lane's slot `head`, in this rank's own window.
  __device__ __forceinline__ const char* slot(const PeerTransport& t) const {
    return static_cast<const char*>(t.local(place.slot(head)));
  }

  // Every lane, after the warp's loads of every slot consumed so far: each lane that consumed
  // slots its writer was not given credit for gives it.
  __device__ __forceinline__ void give_credit(const PeerTransport& t) {
    __syncwarp();  // every lane's loads of the slots before the writers may refill them
    if (active && credited < head) {
      t.signal(place.head_word, place.writer, head);
      credited = head;
    }
  }
};

// Ring (writer, reader, channel) of `area` in a node whose first rank is `node_begin`, as both
// of its ends see it.
__device__ __forceinline__ HtRingPlace ht_ring_place(const HtRingArea& area, int node_begin, int writer, int reader,
                                                     int channel) {
  const int w = writer - node_begin, y = reader - node_begin;
  return HtRingPlace{area.slots(w, channel),
                     area.tail_word(w, channel),
                     area.head_word(y, channel),
                     area.slot_bytes,
                     area.capacity,
                     writer,
                     reader};
}

// Slots a ring end lets pile up before it signals the other end (half the ring, at least
// one): the writer's tail, and the reader's credit. Fewer signals, and the other end still
// goes on while this one works through the rest.
__device__ __forceinline__ uint64_t ht_ring_signal_batch(const HtRingArea& area) {
  return area.capacity > 1 ? area.capacity / 2 : 1;
}

}  // namespace epc::kernels
