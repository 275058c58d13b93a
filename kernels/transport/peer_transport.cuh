// SPDX-License-Identifier: Apache-2.0
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
// is a release store (at GPU scope into this rank's own word) and read_signal an acquire
// load of the word. Peers in other nodes are reached only through the network transport
// (NetTransport, net_transport.cuh): buffer() is this rank's staged copy of its own row in
// its own window (NetStaging: the staging map of kernels/wire/staging_map.hpp places it),
// commit puts it to the peer, and signal travels behind the puts. Writers must not read back what they wrote through
// buffer(). Arrays of records of which the staging map stages parts (low-latency dispatch
// messages: a header per destination, the payload once for all) are reached through
// record_buffer() and commit_record() instead, with the same meaning and one more offset:
// a record's bytes bound for `offset` are staged as the writer's record at `staged_as` (a
// token's message lies at a different index in each destination, ll_message_index.cuh, but
// is staged once, as the token's); bytes staged once have one address for every peer
// outside the node, where the writer writes them once, and commit_record puts them to each
// peer it names.
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

#include "kernels/device/flags.cuh"
#include "kernels/transport/net_transport.cuh"
#include "kernels/wire/transport.hpp"

namespace epc::kernels {

__device__ inline bool PeerTransport::in_node(int peer) const {
  return one_node || static_cast<unsigned>(peer - node_begin) < static_cast<unsigned>(node_size);
}

// The staged copy of `offset` for a peer outside this node (kernels/wire/staging_map.hpp),
// or kNotStaged for a byte of no row this rank owns: a planner bug that the staging map's
// unit tests rule out for every kernel write.
// A call, not inlined: the lookup walks the map's arrays, and inlined at every buffer() and
// commit() of a kernel it sat among the hot loops that one-node launches run, which made
// them slower (bench/results/ll_session11_ab_1xh100.md).
__device__ __noinline__ static uint64_t staged_offset_call(const StagingMap* map, uint64_t offset, int rank, int peer) {
  return map->staged_row_offset(offset, rank, peer);
}
// The same for bytes of record parts (low-latency messages: headers per destination, the
// payload once for all), a call of its own so that its division costs the other lookups
// nothing.
__device__ __noinline__ static uint64_t staged_part_call(const StagingMap* map, uint64_t offset, int rank, int peer) {
  return map->staged_part_offset(offset, rank, peer);
}

// The network's put and signal, as calls for the same reason: one-node launches never make
// them, and their copy loops would otherwise sit inlined at every commit and signal.
__device__ __noinline__ static void net_put_call(NetTransport net, ncclWindow_t window, int peer, uint64_t dst_offset,
                                                 uint64_t src_offset, uint64_t bytes, int part, int parts) {
  net.put(window, peer, dst_offset, src_offset, bytes, part, parts);
}
__device__ __noinline__ static void net_signal_call(NetTransport net, ncclWindow_t window, int peer, int peer_node,
                                                    uint64_t offset, uint64_t delta) {
  net.signal(window, peer, peer_node, offset, delta);
}

__device__ inline uint64_t PeerTransport::staged(uint64_t offset, int peer) const {
  return staged_offset_call(staging.map, offset, staging.rank, peer);
}

__device__ inline uint64_t PeerTransport::staged_part(uint64_t offset, int peer) const {
  return staged_part_call(staging.map, offset, staging.rank, peer);
}

__device__ inline void* PeerTransport::local(uint64_t offset) const {
  return reinterpret_cast<void*>(local_base + offset);
}

// ncclGetPeerPointer's address for a peer of this node, from this struct alone.
__device__ inline void* PeerTransport::node_peer(uint64_t offset, int peer) const {
  return reinterpret_cast<void*>(node_base + static_cast<uint64_t>(peer) * node_stride + offset);
}

// An unstaged byte gets a null pointer, so the write faults where it is made instead of
// landing in another row's staging; commit and signal then send nothing, and the peer
// times out naming this rank (as a word without a GIN signal does).
__device__ inline void* PeerTransport::buffer(uint64_t offset, int peer) const {
  if (in_node(peer)) return node_peer(offset, peer);
  const uint64_t at = staged(offset, peer);
  return at == kNotStaged ? nullptr : local(at);
}

__device__ inline void PeerTransport::commit(uint64_t offset, uint64_t bytes, int peer, int part, int parts) const {
  if (in_node(peer)) return;
  const uint64_t at = staged(offset, peer);
  if (at != kNotStaged) net_put_call(net, window, peer, offset, at, bytes, part, parts);
}

__device__ inline void* PeerTransport::record_buffer(uint64_t staged_as, uint64_t offset, int peer) const {
  if (in_node(peer)) return node_peer(offset, peer);
  const uint64_t at = staged_part(staged_as, peer);
  return at == kNotStaged ? nullptr : local(at);
}

__device__ inline void PeerTransport::commit_record(uint64_t staged_as, uint64_t offset, uint64_t bytes, int peer,
                                                    int part, int parts) const {
  if (in_node(peer)) return;
  const uint64_t at = staged_part(staged_as, peer);
  if (at != kNotStaged) net_put_call(net, window, peer, offset, at, bytes, part, parts);
}

// Across nodes the network only adds, so the word gets value - (the value last signalled
// into it). That previous value is kept in the staging copy of the word, which nothing
// else writes (signal words are never written through buffer()) and which starts zeroed,
// like the word itself.
__device__ inline void PeerTransport::signal(uint64_t offset, int peer, uint64_t value) const {
  if (in_node(peer)) {
    // This rank's own word is read only by this GPU: a GPU-scope release orders what it
    // publishes for those readers and costs less than the system scope other GPUs need.
    uint64_t* word = static_cast<uint64_t*>(node_peer(offset, peer));
    if (word == local(offset)) {
      store_release_gpu(word, value);
    } else {
      store_release(word, value);
    }
    return;
  }
  const uint64_t at = staged(offset, peer);
  if (at == kNotStaged) return;
  uint64_t* last = static_cast<uint64_t*>(local(at));
  const uint64_t delta = value - *last;
  *last = value;
  net_signal_call(net, window, peer, peer / node_size, offset, delta);
}

__device__ inline uint64_t PeerTransport::read_signal(uint64_t offset, int writer) const {
  if (in_node(writer)) return load_acquire(static_cast<uint64_t*>(local(offset)));
  return net.read_signal(window, offset, node_begin / node_size);
}

__device__ inline void PeerTransport::flush() const { net.flush(); }

}  // namespace epc::kernels
