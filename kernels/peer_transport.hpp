// How the low-latency kernels reach other ranks' windows; they use nothing else for it.
//
//   local(offset)                this rank's own window at `offset`, where peers' data lands
//   buffer(offset, peer)         where to write bytes meant for `peer`'s window at `offset`
//   commit(offset, bytes, peer)  after the block has written them (one thread, after a block
//                                barrier): make them travel
//   signal(offset, peer, value)  publish everything committed before it with a release store
//                                of `value` into `peer`'s signal word at `offset`
//
// LsaTransport, for peers in this rank's NVLink (LSA) team, returns the peer's own memory
// through NVLink, so stores land there directly and commit has nothing to do. A network
// implementation (GIN, for peers outside the team: the multi-node issue) returns a local
// staging slot at the same offset and puts it to the peer in commit, with the same ordering
// promise for signal. Writers must not read back what they wrote through buffer().
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#ifdef __CUDACC__
#include "kernels/device/flags.cuh"
#endif

namespace epc::kernels {

// Plain data, passed to kernels by value inside their parameter structs (host code fills
// it; only device code calls it).
struct LsaTransport {
  ncclWindow_t window;

#ifdef __CUDACC__
  __device__ void* local(uint64_t offset) const { return ncclGetLocalPointer(window, offset); }
  __device__ void* buffer(uint64_t offset, int peer) const { return ncclGetPeerPointer(window, offset, peer); }
  __device__ void commit(uint64_t /*offset*/, uint64_t /*bytes*/, int /*peer*/) const {}
  __device__ void signal(uint64_t offset, int peer, uint64_t value) const {
    store_release(static_cast<uint64_t*>(ncclGetPeerPointer(window, offset, peer)), value);
  }
#endif
};

using PeerTransport = LsaTransport;

}  // namespace epc::kernels
