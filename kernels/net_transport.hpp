// The network transport: how data crosses between nodes. Kernels reach it only through
// PeerTransport (peer_transport.hpp), for peers outside their node.
//
//   put(peer, dst_offset, src_offset, bytes, part, parts)
//                                             copy `bytes` of this rank's window at
//                                             src_offset into `peer`'s window at
//                                             dst_offset; `parts` threads call it together,
//                                             this one as number `part`
//   signal(peer, offset, value)               store `value` into `peer`'s word at `offset`,
//                                             visible there only after every put issued
//                                             before it by this thread (or by threads that
//                                             synchronised with it) has landed
//   flush()                                   the sources of earlier puts may be rewritten
//
// This build has one implementation, LsaNetStandIn: the puts are copies through NVLink,
// used between virtual nodes inside one NVLink domain (EpcGroupConfig.virtual_node_size) so
// the network code paths and their ordering are exercised on one host. A GIN implementation
// (ncclGin put/signal) is the next step; until then groups whose ranks span NVLink domains
// are refused at creation.
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#ifdef __CUDACC__
#include "kernels/device/flags.cuh"
#endif

namespace epc::kernels {

struct LsaNetStandIn {
  ncclWindow_t window;

#ifdef __CUDACC__
  // Split over the `parts` calling threads in the widest words both ends' alignment allows
  // (staging mirrors the window span, so source and destination agree modulo 256).
  __device__ void put(int peer, uint64_t dst_offset, uint64_t src_offset, uint64_t bytes, int part,
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
  __device__ void signal(int peer, uint64_t offset, uint64_t value) const {
    __threadfence_system();
    store_release(static_cast<uint64_t*>(ncclGetPeerPointer(window, offset, peer)), value);
  }
  __device__ void flush() const {}
#endif
};

using NetTransport = LsaNetStandIn;

}  // namespace epc::kernels
