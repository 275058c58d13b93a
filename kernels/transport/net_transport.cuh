// SPDX-License-Identifier: Apache-2.0
// The network transport: how data and signals cross between nodes. Kernels reach it only
// through PeerTransport (peer_transport.cuh), for peers outside their node, and never know
// which implementation they run on.
//
//   put(window, peer, dst_offset, src_offset, bytes, part, parts)
//                          copy `bytes` of this rank's window at src_offset into `peer`'s
//                          window at dst_offset; `parts` threads call it together, this one
//                          as number `part`, after every writer of the bytes synchronised
//                          with them
//   signal(window, peer, peer_node, offset, delta)
//                          add `delta` onto `peer`'s signal word at `offset`; visible there
//                          only after every put issued before it by this thread (or by
//                          threads that synchronised with it) to that peer has landed
//   read_signal(window, offset, own_node)
//                          acquire read of this rank's signal word at `offset`, as written by
//                          peers of other nodes: seeing a value makes every byte put before
//                          the signal that made it readable
//   flush()                the sources of this thread's earlier puts may be rewritten
//
// Signals only add because GIN's only add (gin_transport.cuh); PeerTransport turns the
// kernels' "store value" into "add value - previous value" for both implementations, so a
// word reads the last value stored. Two implementations, chosen at group creation (kind):
//
//   LsaNetStandIn  puts are copies through NVLink, signals atomic adds on the peer's word,
//                  read_signal reads the word: virtual nodes inside one NVLink domain
//                  (EpcGroupConfig.virtual_node_size) run the network code paths, their
//                  ordering and the add-only signals on one host.
//   GinNetTransport  ncclGin puts and signals on the context the planner reserved; used when
//                  the ranks span LSA teams and NCCL provides GIN. Compiled, never run on
//                  network hardware (there were no NICs where it was written).
#pragma once

#include <nccl.h>
#include <nccl_device.h>
#include <cuda/atomic>

#include <cstdint>

#include "kernels/device/flags.cuh"
#include "kernels/transport/gin_transport.cuh"
#include "kernels/wire/transport.hpp"

namespace epc::kernels {

// Stateless: the window comes from PeerTransport with every call.
struct LsaNetStandIn {
  // Split over the `parts` calling threads in the widest words both ends' alignment allows
  // (staged rows start 16-byte aligned, so a 16-byte-aligned window row keeps 16-byte words).
  __device__ void put(ncclWindow_t window, int peer, uint64_t dst_offset, uint64_t src_offset, uint64_t bytes, int part,
                      int parts) const {
    const char* src = static_cast<const char*>(ncclGetLocalPointer(window, src_offset));
    char* dst = static_cast<char*>(ncclGetPeerPointer(window, dst_offset, peer));
    const uint64_t first = static_cast<uint64_t>(part), stride = static_cast<uint64_t>(parts);
    if (((dst_offset | src_offset | bytes) & 15) == 0) {
      for (uint64_t i = first * 16; i < bytes; i += stride * 16) {
        *reinterpret_cast<int4*>(dst + i) = *reinterpret_cast<const int4*>(src + i);
      }
    } else if (((dst_offset | src_offset | bytes) & 3) == 0) {
      for (uint64_t i = first * 4; i < bytes; i += stride * 4) {
        *reinterpret_cast<int32_t*>(dst + i) = *reinterpret_cast<const int32_t*>(src + i);
      }
    } else {
      for (uint64_t i = first; i < bytes; i += stride) dst[i] = src[i];
    }
  }
  // An add, like GIN's signals, so the stand-in exercises the same bookkeeping; the fence
  // publishes the puts (NVLink stores by this thread and those ordered before it) first.
  __device__ void signal(ncclWindow_t window, int peer, uint64_t offset, uint64_t delta) const {
    __threadfence_system();
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system> word(
        *static_cast<uint64_t*>(ncclGetPeerPointer(window, offset, peer)));
    word.fetch_add(delta, cuda::memory_order_release);
  }
  __device__ uint64_t read_signal(ncclWindow_t window, uint64_t offset) const {
    return load_acquire(static_cast<uint64_t*>(ncclGetLocalPointer(window, offset)));
  }
  __device__ void flush() const {}  // puts are synchronous copies
};

__device__ inline void NetTransport::put(ncclWindow_t window, int peer, uint64_t dst_offset, uint64_t src_offset,
                                         uint64_t bytes, int part, int parts) const {
  if (kind == NetKind::kGin) {
    gin.put(window, peer, dst_offset, src_offset, bytes, part, parts);
  } else {
    LsaNetStandIn{}.put(window, peer, dst_offset, src_offset, bytes, part, parts);
  }
}

__device__ inline void NetTransport::signal(ncclWindow_t window, int peer, int peer_node, uint64_t offset,
                                            uint64_t delta) const {
  if (kind == NetKind::kGin) {
    gin.signal(peer, peer_node, offset, delta);
  } else {
    LsaNetStandIn{}.signal(window, peer, offset, delta);
  }
}

__device__ inline uint64_t NetTransport::read_signal(ncclWindow_t window, uint64_t offset, int own_node) const {
  return kind == NetKind::kGin ? gin.read_signal(offset, own_node) : LsaNetStandIn{}.read_signal(window, offset);
}

__device__ inline void NetTransport::flush() const {
  if (kind == NetKind::kGin) gin.flush();
}

}  // namespace epc::kernels
