// SPDX-License-Identifier: Apache-2.0
// The GIN network transport: NCCL's GPU-initiated networking (ncclGin) between ranks of
// different LSA teams. One of the two implementations behind NetTransport
// (net_transport.cuh); kernels reach it only through PeerTransport.
//
// Compiled into the library and chosen when the ranks span LSA teams and NCCL provides GIN
// (core/gin_support.hpp), but never run on network hardware: the machines this was written
// on have no NICs. Everything below follows the contract in nccl_device/gin.h of NCCL
// 2.28.9. Group creation zeroes the signals and destroy flushes (kernels/transport/gin_lifecycle.cu).
//
// What GIN guarantees, and how the transport uses it:
//   - A put is ordered only through signals: a signal applied at the receiver becomes
//     visible after the payloads of this context's earlier puts to the same peer have
//     settled. A put of a plain value (putValue) carries no such order, so flags never
//     travel as window words: each window word a peer of another node writes has a GIN
//     signal of its own (kernels/wire/gin_signal_map.hpp), and its reader reads that signal
//     (read_signal) instead of the word.
//   - Signals only add (SignalAdd; SignalInc; no SignalSet in 2.28.9). PeerTransport turns
//     "store value" into "add value - previous", keeping the previous value in the
//     sender's staging copy of the word, so the receiver's signal always holds the last
//     value stored, whatever kind of word it is (a set flag or a growing counter). That
//     needs one writer per word and successive stores to it ordered, as plain stores do
//     for the last one to win.
//   - Signals live per context; sender and receiver use context `context` (0), so both
//     name the same counter.
//   - Peers are world ranks (ncclTeamWorld), which is how epcomm numbers ranks.
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "kernels/wire/transport.hpp"

namespace epc::kernels {

// Every kernel that moves data contains this path (NetTransport chooses at run time), so
// its work is out of line: inlined, the two GIN backends' code raises the register pressure
// of the high-throughput kernels (docs/tuning.md), and NVLink-only groups would pay for a
// path they never take. The functions take the transport by value: a member function would
// take the address of the kernel parameter, which makes ptxas copy every parameter to the
// stack.
namespace gin_calls {

// The system-scope fence makes the bytes the group wrote (ordered before this thread by
// the callers' barrier) visible to the NIC before it reads them; NCCL's two backends
// disagree on when they fence by themselves.
__device__ __noinline__ static void post_put(GinNetTransport self, ncclWindow_t window, int peer, uint64_t dst_offset,
                                             uint64_t src_offset, uint64_t bytes) {
  __threadfence_system();
  ncclGin gin(self.state->comm, self.context);
  gin.put(ncclTeamWorld(self.state->comm), peer, window, dst_offset, window, src_offset, bytes, ncclGin_None{},
          ncclGin_None{}, ncclCoopThread{});
}

// A word with no signal is a planner bug (its unit tests check every word the kernels
// signal across nodes); nothing is sent, and the reader times out naming this rank
// rather than reading a word GIN never wrote.
__device__ __noinline__ static void post_signal(GinNetTransport self, int peer, int peer_node, uint64_t offset,
                                                uint64_t delta) {
  const uint32_t id = self.state->signals.id(offset, peer_node);
  if (id == kNoGinSignal) return;
  ncclGin gin(self.state->comm, self.context);
  gin.signal(ncclTeamWorld(self.state->comm), peer, ncclGin_SignalAdd{id, delta}, ncclCoopThread{});
}

__device__ __noinline__ static uint64_t load_signal(GinNetTransport self, uint64_t offset, int own_node) {
  const uint32_t id = self.state->signals.id(offset, own_node);
  if (id == kNoGinSignal) return 0;
  ncclGin gin(self.state->comm, self.context);
  return gin.readSignal(id);
}

__device__ __noinline__ static void wait_sources(GinNetTransport self) {
  ncclGin gin(self.state->comm, self.context);
  gin.flush(ncclCoopThread{});
}

}  // namespace gin_calls

// `parts` threads call together, after every writer of the source bytes synchronised with
// them; one of them posts the put. ncclGin's cooperative put also posts from one thread
// (thread 0 of its ncclCoop) between two syncs of the group; the callers have synchronised
// already, and `parts` may be a warp or a whole block, so the posting thread acts as
// ncclCoopThread and the others return at once.
__device__ inline void GinNetTransport::put(ncclWindow_t window, int peer, uint64_t dst_offset, uint64_t src_offset,
                                            uint64_t bytes, int part, int /*parts*/) const {
  if (part == 0 && bytes != 0) gin_calls::post_put(*this, window, peer, dst_offset, src_offset, bytes);
}

// Adds `delta` onto the signal that carries `peer`'s word at `offset` (`peer_node`: the
// node it is in).
__device__ inline void GinNetTransport::signal(int peer, int peer_node, uint64_t offset, uint64_t delta) const {
  gin_calls::post_signal(*this, peer, peer_node, offset, delta);
}

// The value last signalled into this rank's word at `offset` by a peer of another node
// (this rank is in node `own_node`), with acquire order: a reader that sees it may read
// every byte put to it before that signal.
__device__ inline uint64_t GinNetTransport::read_signal(uint64_t offset, int own_node) const {
  return gin_calls::load_signal(*this, offset, own_node);
}

// The calling thread's earlier puts have read their sources (in both 2.28.9 backends it
// waits for every put of the context). It does not mean the bytes have landed.
__device__ inline void GinNetTransport::flush() const { gin_calls::wait_sources(*this); }

}  // namespace epc::kernels
