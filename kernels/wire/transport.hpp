// SPDX-License-Identifier: Apache-2.0
// What kernels are given to reach other ranks' windows: plain data that the group fills on
// the host (core/group.cpp) and kernels receive by value inside their parameter structs.
// The operations are declared here and defined in kernels/transport/, which is the only
// place that knows how bytes and signals travel:
//
//   PeerTransport   (transport/peer_transport.cuh) every peer, by node: NVLink stores
//                   inside this rank's node, the network transport outside it
//   NetTransport    (transport/net_transport.cuh) the network: GIN, or the LSA stand-in
//                   that runs the network code paths inside one NVLink domain
//   GinNetTransport (transport/gin_transport.cuh) NCCL's GPU-initiated networking
//
// A kernel that calls an operation includes the .cuh that defines it; a host file sees the
// data only.
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "kernels/wire/gin_signal_map.hpp"
#include "kernels/wire/staging_map.hpp"

namespace epc::kernels {

// Where the network-bound bytes wait: the staging map (kernels/wire/staging_map.hpp), in
// device memory beside the window (group creation copies the plan's there; only transports
// of groups of several nodes read it), and the writer it is read for.
struct NetStaging {
  const StagingMap* map;  // nullptr when every rank is in one node
  int32_t rank;           // this rank: the writer of every staged row
  int32_t reserved;
};

// Zero (a zeroed PeerTransport) is the stand-in.
enum class NetKind : int32_t { kLsaStandIn = 0, kGin = 1 };

// What the GIN calls need, in device memory beside the window (group creation copies it
// there). ncclGin keeps a reference to the ncclDevComm it is built from; this one lives as
// long as the group.
struct GinState {
  ncclDevComm comm;  // trivially copyable (200 bytes in 2.28.9)
  GinSignalMap signals;
};

// 16 bytes, so the kernels' parameters do not carry a second ncclDevComm and the signal map.
struct GinNetTransport {
  const GinState* state;
  int32_t context;
  int32_t reserved;

#ifdef __CUDACC__
  __device__ void put(ncclWindow_t window, int peer, uint64_t dst_offset, uint64_t src_offset, uint64_t bytes, int part,
                      int parts) const;
  __device__ void signal(int peer, int peer_node, uint64_t offset, uint64_t delta) const;
  __device__ uint64_t read_signal(uint64_t offset, int own_node) const;
  __device__ void flush() const;
#endif
};

// The branch on `kind` is uniform across every launch (a kernel parameter), so it costs no
// divergence.
struct NetTransport {
  NetKind kind;
  int32_t reserved;
  GinNetTransport gin;  // used when kind == kGin

#ifdef __CUDACC__
  __device__ void put(ncclWindow_t window, int peer, uint64_t dst_offset, uint64_t src_offset, uint64_t bytes, int part,
                      int parts) const;
  __device__ void signal(ncclWindow_t window, int peer, int peer_node, uint64_t offset, uint64_t delta) const;
  __device__ uint64_t read_signal(ncclWindow_t window, uint64_t offset, int own_node) const;
  __device__ void flush() const;
#endif
};

struct PeerTransport {
  ncclWindow_t window;
  // Where the windows of this rank's node are mapped, asked of NCCL once at group creation
  // (kernels/transport/window_pointers.cu): world rank p of the node at node_base + p *
  // node_stride (modulo 2^64), this rank's at local_base. Reaching them then reads no memory.
  uint64_t node_base;
  uint64_t node_stride;
  uint64_t local_base;
  int node_begin;  // first world rank of this rank's node
  int node_size;   // ranks in it; every rank when the group is one node
  // The group is one node: no peer is behind the network. Redundant with node_size, but a
  // kernel compiled for one-node groups sets it in its own copy of the parameters, and the
  // compiler then folds every in_node() test and drops the network branches.
  bool one_node;
  NetStaging staging;
  NetTransport net;

#ifdef __CUDACC__
  __device__ bool in_node(int peer) const;
  __device__ uint64_t staged(uint64_t offset, int peer) const;
  __device__ void* local(uint64_t offset) const;
  __device__ void* node_peer(uint64_t offset, int peer) const;
  __device__ void* buffer(uint64_t offset, int peer) const;
  __device__ void commit(uint64_t offset, uint64_t bytes, int peer, int part, int parts) const;
  // buffer and commit for the bytes of record parts (peer_transport.cuh).
  __device__ uint64_t staged_part(uint64_t offset, int peer) const;
  __device__ void* record_buffer(uint64_t staged_as, uint64_t offset, int peer) const;
  __device__ void commit_record(uint64_t staged_as, uint64_t offset, uint64_t bytes, int peer, int part,
                                int parts) const;
  __device__ void signal(uint64_t offset, int peer, uint64_t value) const;
  __device__ uint64_t read_signal(uint64_t offset, int writer) const;
  __device__ void flush() const;
#endif
};

}  // namespace epc::kernels
