// Waiting for peers' signals through the transport, bounded by the group's timeout: the
// form every wait must take once groups span LSA teams, because a word written from another
// node may never appear in the window (GIN delivers it as a signal of its own; see
// kernels/peer_transport.hpp). The same loops as peer_wait.cuh, which loads window words
// directly and is correct only while every writer is in this node or on the stand-in;
// peer_wait.cuh's pointer forms can go once every wait site uses these.
#pragma once

#include <cstdint>

#include "kernels/device/deadline.cuh"
#include "kernels/device/peer_wait.cuh"
#include "kernels/device/report.cuh"
#include "kernels/peer_transport.hpp"

namespace epc::kernels {

// One thread waits until `reached(value)` for this rank's signal word at `offset`, which
// rank `writer` signals; `*value` receives the last value read. On a timeout the failure
// names `peer` (the rank the step waits for; the writer itself unless a forwarder writes on
// its behalf). Returns false on a timeout or when the group has failed elsewhere.
template <typename Reached>
__device__ __forceinline__ bool wait_for_signal(const PeerTransport& transport, uint64_t offset, int writer,
                                                Reached reached, uint64_t* value, uint64_t timeout_ns,
                                                DeviceError* error, uint32_t phase, int rank, int peer) {
  Deadline deadline(timeout_ns);
  for (uint32_t spins = 0; !reached(*value = transport.read_signal(offset, writer)); ++spins) {
    // As in wait_for_flag: the error word is in host memory, so it and the deadline are
    // checked every kPollsPerCheck polls only.
    __nanosleep(kPollSleepNs);
    if (spins % kPollsPerCheck != kPollsPerCheck - 1) continue;
    if (deadline.expired()) {
      report_failure(error, EPC_ERR_TIMEOUT, phase, rank, peer, deadline.elapsed_ns());
      return false;
    }
    if (group_failed(error)) return false;
  }
  return true;
}

// Threads of the block split the peers; every thread returns the block's outcome. Waits
// until reached(value) for the word of every peer p < nranks, at offset + 8 p and signalled
// by p; stores the low 32 bits of each in `payload[p]` (shared memory, may be null).
template <typename Reached>
__device__ __forceinline__ bool wait_for_every_peer_signal(const PeerTransport& transport, uint64_t offset,
                                                           int nranks, Reached reached, uint32_t* payload,
                                                           uint64_t timeout_ns, DeviceError* error,
                                                           uint32_t phase, int rank) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < nranks; p += blockDim.x) {
    uint64_t value = 0;
    const uint64_t word = offset + static_cast<uint64_t>(p) * sizeof(uint64_t);
    if (!wait_for_signal(transport, word, p, reached, &value, timeout_ns, error, phase, rank, p)) failed = 1;
    if (payload != nullptr) payload[p] = static_cast<uint32_t>(value);
  }
  __syncthreads();
  return failed == 0;
}

// The same for one warp, lanes splitting the peers; every lane returns the warp's outcome.
template <typename Reached>
__device__ __forceinline__ bool warp_wait_for_every_peer_signal(const PeerTransport& transport, uint64_t offset,
                                                                int nranks, Reached reached, uint64_t timeout_ns,
                                                                DeviceError* error, uint32_t phase, int rank) {
  bool ok = true;
  for (int p = threadIdx.x % 32; p < nranks && ok; p += 32) {
    uint64_t value = 0;
    const uint64_t word = offset + static_cast<uint64_t>(p) * sizeof(uint64_t);
    ok = wait_for_signal(transport, word, p, reached, &value, timeout_ns, error, phase, rank, p);
  }
  return __all_sync(0xffffffffu, ok);
}

}  // namespace epc::kernels
