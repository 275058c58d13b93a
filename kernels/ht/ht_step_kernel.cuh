// SPDX-License-Identifier: Apache-2.0
// The launch shape shared by high-throughput dispatch and combine. `Parts` names the
// operation's parameters, its step and finished-block counters in HtState, prologues run
// by every thread of sending launches (which may end in a barrier) and of receiving
// launches, and its sending, forwarding (across nodes) and receiving parts. Sending and receiving warps
// run in one launch when the whole grid fits on the GPU at once (receivers spin on flags
// that senders of the same launch raise, so every block must be resident), else the two
// parts run one after the other; a step split by EPC_STEP_SEND_ONLY queues the sending
// launch alone and, at epc_complete, the receiving one. The last block of a receiving
// launch acknowledges the step to every rank that wrote into this rank's slots, which lets
// them overwrite those slots next time. Both launches of a split step read the same step
// counter, which only the receiving launch moves, so no other step of the operation may
// start on the group between them (core/ht/ht_handle.cpp refuses it).
#pragma once

#include <cuda_runtime.h>

#include "kernels/common/kernel_stack.hpp"
#include "kernels/common/resident_blocks.hpp"
#include "kernels/device/launch_done.cuh"
#include "kernels/ht/ht_warp_roles.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ht_params.hpp"

namespace epc::kernels {

// Restates, as constants of a kernel's own copy of its parameters, what is true of every
// one-node group: the compiler then folds the transport's and the geometry's node tests
// and drops the network branches from the kernel, which lowers its register spills
// (docs/tuning.md).
__device__ __forceinline__ void fold_one_node(HtCommon& c) {
  c.transport.one_node = true;
  c.geo.num_nodes = 1;
}

// The end of a step on this rank, from one thread once nothing of the step will read this
// rank's slots again: every rank that wrote into them may write them again, and the group's
// next step of the operation uses the next counter value.
template <typename Parts>
__device__ __forceinline__ void finish_ht_step(const typename Parts::Params& p, uint64_t step) {
  const HtCommon& c = p.common;
  const uint64_t mine = ht_ack_word(p.channel.acks_offset, c.geo.rank);
  for (int s = 0; s < c.geo.nranks; ++s) c.transport.signal(mine, s, step + 1);
  *Parts::step_counter(c.state) = step + 1;
}

// One launch's part of a step, as ht_step_kernel below instantiates it.
template <typename Parts, bool kSend, bool kReceive, bool kAcrossNodes>
__device__ __forceinline__ void ht_step(const typename Parts::Params& p) {
  const HtCommon& c = p.common;
  // A layout that overflowed under EPC_OVERFLOW_FAIL stops its steps on every rank alike
  // (each derived it from the same counts) before they touch a peer (ht_capacity.hpp).
  if (c.handle.overflow->skip_steps != 0) return;
  const uint64_t step = *Parts::step_counter(c.state);
  const WarpRole role = warp_role<kSend, kReceive>(c.send_warps, kAcrossNodes ? c.forward_warps : 0);
  if (kSend) Parts::send_prologue(p);
  if (kReceive) Parts::prologue(p);
  if (role.kind == HtRole::kSend) {
    Parts::send(p, step, role);
  } else if (kAcrossNodes && role.kind == HtRole::kForward) {
    Parts::forward(p, step, role);
  } else {
    Parts::receive(p, step, role);
  }
  if (last_block_to_finish(Parts::done_counter(c.state)) && kReceive && threadIdx.x == 0) {
    finish_ht_step<Parts>(p, step);
  }
}

// kAcrossNodes: the group has several nodes, and the launch forwarding warps. A template
// flag, not only forward_warps, so that one-node groups run kernels compiled for one node:
// without the forwarding code, whose inlining raises the spills of the whole HT combine
// kernel and slows one-node combine (docs/tuning.md), and with every node test folded
// (fold_one_node).
template <typename Parts, bool kSend, bool kReceive, bool kAcrossNodes>
__global__ void __launch_bounds__(kHtThreads) ht_step_kernel(typename Parts::Params params) {
  if constexpr (kAcrossNodes) {
    static_assert(!Parts::kOneNode, "these kernels serve groups of one node");
    ht_step<Parts, kSend, kReceive, true>(params);
  } else {
    typename Parts::Params p = params;
    fold_one_node(p.common);
    ht_step<Parts, kSend, kReceive, false>(p);
  }
}

// A step whose sending launch ran and whose receiving launch never will (a handle destroyed
// with a send-only step pending): one thread ends the step as the receiving launch would,
// so that peers and this rank's next step go on. What peers wrote for it is left unread.
template <typename Parts>
__global__ void ht_abandon_kernel(typename Parts::Params params) {
  if (params.common.handle.overflow->skip_steps != 0) return;  // no launch of the step ran (ht_step)
  if (threadIdx.x == 0) finish_ht_step<Parts>(params, *Parts::step_counter(params.common.state));
}

// `halves`: the whole step, fused when the grid fits, else the sending launch then the
// receiving one; or one of those two launches alone (a split step).
template <typename Parts, bool kAcrossNodes>
cudaError_t launch_ht_step_kernels(const typename Parts::Params& params, int blocks, HtHalves halves,
                                   cudaStream_t stream) {
  static ResidentBlocks fused_capacity(kHtThreads);
  if (halves == HtHalves::kBoth && blocks <= fused_capacity.get(ht_step_kernel<Parts, true, true, kAcrossNodes>, 0)) {
    ht_step_kernel<Parts, true, true, kAcrossNodes><<<blocks, kHtThreads, 0, stream>>>(params);
    return cudaGetLastError();
  }
  if (halves != HtHalves::kReceive) {
    ht_step_kernel<Parts, true, false, kAcrossNodes><<<blocks, kHtThreads, 0, stream>>>(params);
    const cudaError_t sent = cudaGetLastError();
    if (sent != cudaSuccess || halves == HtHalves::kSend) return sent;
  }
  ht_step_kernel<Parts, false, true, kAcrossNodes><<<blocks, kHtThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

template <typename Parts>
cudaError_t launch_ht_step(const typename Parts::Params& params, int blocks, HtHalves halves, cudaStream_t stream) {
  if constexpr (Parts::kOneNode) {
    return launch_ht_step_kernels<Parts, false>(params, blocks, halves, stream);  // the handle checks
  } else {
    return params.common.forward_warps > 0 ? launch_ht_step_kernels<Parts, true>(params, blocks, halves, stream)
                                           : launch_ht_step_kernels<Parts, false>(params, blocks, halves, stream);
  }
}

template <typename Parts>
cudaError_t launch_ht_abandon(const typename Parts::Params& params, cudaStream_t stream) {
  ht_abandon_kernel<Parts><<<1, kWarpSize, 0, stream>>>(params);
  return cudaGetLastError();
}

// Blocks of the fused kernel of one node that fit on the GPU at once.
template <typename Parts>
int ht_fused_blocks() {
  static ResidentBlocks fused_capacity(kHtThreads);
  return fused_capacity.get(ht_step_kernel<Parts, true, true, false>, 0);
}

template <typename Parts>
size_t ht_step_local_bytes() {
  if constexpr (Parts::kOneNode) {
    return max_local_bytes(ht_step_kernel<Parts, true, true, false>, ht_step_kernel<Parts, true, false, false>,
                           ht_step_kernel<Parts, false, true, false>);
  } else {
    return max_local_bytes(ht_step_kernel<Parts, true, true, false>, ht_step_kernel<Parts, true, false, false>,
                           ht_step_kernel<Parts, false, true, false>, ht_step_kernel<Parts, true, true, true>,
                           ht_step_kernel<Parts, true, false, true>, ht_step_kernel<Parts, false, true, true>,
                           ht_abandon_kernel<Parts>);
  }
}

}  // namespace epc::kernels
