// SPDX-License-Identifier: Apache-2.0
// Waiting for peers' signals, bounded by the group's timeout. Every wait reads through the
// transport (PeerTransport::read_signal, naming the rank that writes the word), because a
// word written from another node may never appear in the window: GIN delivers it as a
// signal of its own (kernels/transport/peer_transport.cuh).
#pragma once

#include <cstdint>

#include "kernels/device/peer_wait.cuh"
#include "kernels/transport/peer_transport.cuh"

namespace epc::kernels {

// One thread waits until `reached(value)` for this rank's signal word at `offset`, which
// rank `writer` signals; `*value` receives the last value read. On a timeout the failure
// names `peer` (the rank the step waits for; the writer itself unless a forwarder writes on
// its behalf) and, for a step signal, the epoch `wanted` (poll_until). Returns false on a
// timeout or when the group has failed elsewhere.
template <typename Reached>
__device__ __forceinline__ bool wait_for_signal(const PeerTransport& transport, uint64_t offset, int writer,
                                                Reached reached, uint64_t* value, uint64_t timeout_ns,
                                                DeviceError* error, uint32_t phase, int rank, int peer,
                                                uint32_t wanted = 0) {
  return poll_until([&] { return transport.read_signal(offset, writer); }, reached, value, timeout_ns, error, phase,
                    rank, peer, wanted);
}

// A peer a wait does not wait for, and the low 32 bits taken as its word's (`rank` -1:
// none). A fused low-latency launch sends itself nothing through its window.
struct SkippedPeer {
  int rank = -1;
  uint32_t payload = 0;
};

// What a wait keeps of peer p's word: its low 32 bits.
struct LowWord {
  __device__ uint32_t operator()(int, uint64_t value) const { return static_cast<uint32_t>(value); }
};

// Threads of the block split the peers; every thread returns the block's outcome. Waits
// until reached(value) for the word of every peer p < nranks but `skipped`, at offset +
// stride p and signalled by p; stores keep(p, word) (skipped's: its payload) in `payload[p]`
// (shared memory, may be null). `wanted`: as wait_for_signal's.
template <typename Reached, typename Keep = LowWord>
__device__ __forceinline__ bool wait_for_every_peer_signal(const PeerTransport& transport, uint64_t offset, int nranks,
                                                           Reached reached, uint32_t* payload, uint64_t timeout_ns,
                                                           DeviceError* error, uint32_t phase, int rank,
                                                           uint64_t stride = sizeof(uint64_t), SkippedPeer skipped = {},
                                                           Keep keep = {}, uint32_t wanted = 0) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < nranks; p += blockDim.x) {
    uint64_t value = skipped.payload;
    const uint64_t word = offset + static_cast<uint64_t>(p) * stride;
    if (p != skipped.rank &&
        !wait_for_signal(transport, word, p, reached, &value, timeout_ns, error, phase, rank, p, wanted))
      failed = 1;
    if (payload != nullptr) payload[p] = keep(p, value);
  }
  __syncthreads();
  return failed == 0;
}

// The same for one warp, lanes splitting the peers; every lane returns the warp's outcome.
template <typename Reached>
__device__ __forceinline__ bool warp_wait_for_every_peer_signal(const PeerTransport& transport, uint64_t offset,
                                                                int nranks, Reached reached, uint64_t timeout_ns,
                                                                DeviceError* error, uint32_t phase, int rank,
                                                                uint64_t stride = sizeof(uint64_t)) {
  bool ok = true;
  for (int p = threadIdx.x % 32; p < nranks && ok; p += 32) {
    uint64_t value = 0;
    const uint64_t word = offset + static_cast<uint64_t>(p) * stride;
    ok = wait_for_signal(transport, word, p, reached, &value, timeout_ns, error, phase, rank, p);
  }
  return __all_sync(0xffffffffu, ok);
}

// The low-latency step signal: waits until word p >> 32 == epoch for every peer p but
// `skipped`, the words `stride` bytes apart.
template <typename Keep>
__device__ __forceinline__ bool wait_for_peers_signal(const PeerTransport& transport, uint64_t offset, int nranks,
                                                      uint32_t epoch, uint32_t* payload, uint64_t timeout_ns,
                                                      DeviceError* error, uint32_t phase, int rank, uint64_t stride,
                                                      SkippedPeer skipped, Keep keep) {
  return wait_for_every_peer_signal(
      transport, offset, nranks, [epoch](uint64_t v) { return static_cast<uint32_t>(v >> 32) == epoch; }, payload,
      timeout_ns, error, phase, rank, stride, skipped, keep, epoch);
}

}  // namespace epc::kernels
