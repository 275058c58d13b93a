// How kernels reach other ranks' windows; they use nothing else for it.
//
//   local(offset)                this rank's own window at `offset`, where peers' data lands
//   buffer(offset, peer)         where to write bytes meant for `peer`'s window at `offset`
//   commit(offset, bytes, peer, part, parts)
//                                make those bytes travel; called together by `parts` threads
//                                (this one is number `part`: a warp's lanes, a block's
//                                threads) after every writer of the bytes has synchronised
//                                with them (a block or warp barrier)
//   signal(offset, peer, value)  publish everything committed before it (by this thread, or
//                                by threads that synchronised with it) by making `peer`'s
//                                signal word at `offset` read `value`
//   read_signal(offset, writer)  acquire read of this rank's signal word at `offset`, which
//                                rank `writer` signals: after seeing a value, every byte
//                                committed before the signal that made it may be read
//   flush()                      the sources of this thread's earlier commits may be rewritten
//
// Peers in this rank's node (its NVLink/LSA team, or its virtual node) are reached by direct
// stores through NVLink: buffer() is the peer's own memory, commit has nothing to do, signal
// is a release store and read_signal an acquire load of the word. Peers in other nodes are
// reached only through the network transport (NetTransport, net_transport.hpp): buffer() is
// a staging copy in this rank's own window (NetStaging), commit puts it to the peer, and
// signal travels behind the puts. Writers must not read back what they wrote through
// buffer().
//
// Signal words follow two rules, which the kernels' flags and counters already keep:
//   - One rank writes a given word of a given peer (rows of signal arrays are per writer),
//     and its successive signals to it are ordered (one per step, steps in order).
//   - A word is signalled again only after its reader saw the previous value (set flags,
//     acknowledged before they are rewritten), or its values only grow and readers test
//     "at least" (acknowledgements, layout signals).
// Across nodes the network may deliver the word somewhere other than the window (GIN keeps
// it in a signal of its own), so a word written from another node must be read with
// read_signal naming that writer, never by loading local(offset).
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "kernels/transport/net_transport.hpp"

namespace epc::kernels {

// Where the network-bound bytes wait (core/planner.hpp, NetStagingLayout): one mirror of the
// window span [span_begin, span_begin + span_bytes) per rank outside this node, in the
// order of their world ranks.
struct NetStaging {
  uint64_t offset;
  uint64_t span_begin;
  uint64_t span_bytes;
};

// Plain data, passed to kernels by value inside their parameter structs (host code fills
// it; only device code calls it).
struct PeerTransport {
  ncclWindow_t window;
  int node_begin;  // first world rank of this rank's node
  int node_size;   // ranks in it; every rank when the group is one node
  // The group is one node: no peer is behind the network. Redundant with node_size, but a
  // kernel compiled for one-node groups sets it in its own copy of the parameters, and the
  // compiler then folds every in_node() test and drops the network branches.
  bool one_node;
  NetStaging staging;
  NetTransport net;

#ifdef __CUDACC__
  __device__ bool in_node(int peer) const {
    return one_node || static_cast<unsigned>(peer - node_begin) < static_cast<unsigned>(node_size);
  }
  // The staged copy of `offset` for a peer outside this node.
  __device__ uint64_t staged(uint64_t offset, int peer) const {
    const uint64_t remote = static_cast<uint64_t>(peer < node_begin ? peer : peer - node_size);
    return staging.offset + remote * staging.span_bytes + (offset - staging.span_begin);
  }

  __device__ void* local(uint64_t offset) const { return ncclGetLocalPointer(window, offset); }
  __device__ void* buffer(uint64_t offset, int peer) const {
    return in_node(peer) ? ncclGetPeerPointer(window, offset, peer) : local(staged(offset, peer));
  }
  __device__ void commit(uint64_t offset, uint64_t bytes, int peer, int part, int parts) const {
    if (!in_node(peer)) net.put(window, peer, offset, staged(offset, peer), bytes, part, parts);
  }
  // Across nodes the network only adds, so the word gets value - (the value last signalled
  // into it). That previous value is kept in the staging copy of the word, which nothing
  // else writes (signal words are never written through buffer()) and which starts zeroed,
  // like the word itself.
  __device__ void signal(uint64_t offset, int peer, uint64_t value) const {
    if (in_node(peer)) {
      store_release(static_cast<uint64_t*>(ncclGetPeerPointer(window, offset, peer)), value);
      return;
    }
    uint64_t* last = static_cast<uint64_t*>(local(staged(offset, peer)));
    const uint64_t delta = value - *last;
    *last = value;
    net.signal(window, peer, peer / node_size, offset, delta);
  }
  __device__ uint64_t read_signal(uint64_t offset, int writer) const {
    if (in_node(writer)) return load_acquire(static_cast<uint64_t*>(local(offset)));
    return net.read_signal(window, offset, node_begin / node_size);
  }
  __device__ void flush() const { net.flush(); }
#endif
};

}  // namespace epc::kernels
