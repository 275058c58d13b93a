// The launch shape shared by high-throughput dispatch and combine. `Parts` names the
// operation's parameters, its step and finished-block counters in HtState, a prologue run
// by receiving launches, and its sending, forwarding (across nodes) and receiving parts. Sending and receiving warps
// run in one launch when the whole grid fits on the GPU at once (receivers spin on flags
// that senders of the same launch raise, so every block must be resident), else the two
// parts run one after the other. The last block to finish acknowledges the step to every
// rank that wrote into this rank's slots, which lets them overwrite those slots next time.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device/launch_done.cuh"
#include "kernels/kernel_stack.hpp"
#include "kernels/ht_params.hpp"
#include "kernels/ht_warp_roles.cuh"
#include "kernels/resident_blocks.cuh"

namespace epc::kernels {

// kForward: the launch has forwarding warps (groups of several nodes). A template flag, not
// only forward_warps, so that one-node groups run kernels without the forwarding code: it
// raised the spills of the whole HT combine kernel (ptxas, sm_90: spill loads 268 -> 712
// bytes) and made one-node combine 10% slower (2 H200, 4096 tokens: 292 -> 322 us).
template <typename Parts, bool kSend, bool kReceive, bool kForward>
__global__ void __launch_bounds__(kHtThreads) ht_step_kernel(typename Parts::Params p) {
  const HtCommon& c = p.common;
  uint64_t* step_counter = Parts::step_counter(c.state);
  const uint64_t step = *step_counter;
  const WarpRole role = warp_role<kSend, kReceive>(c.send_warps, kForward ? c.forward_warps : 0);
  if (kReceive) Parts::prologue(p);
  if (role.kind == HtRole::kSend) {
    Parts::send(p, step, role);
  } else if (kForward && role.kind == HtRole::kForward) {
    Parts::forward(p, step, role);
  } else {
    Parts::receive(p, step, role);
  }
  if (last_block_to_finish(Parts::done_counter(c.state)) && kReceive && threadIdx.x == 0) {
    const uint64_t mine = p.channel.acks_offset + static_cast<uint64_t>(c.geo.rank) * sizeof(uint64_t);
    for (int s = 0; s < c.geo.nranks; ++s) c.transport.signal(mine, s, step + 1);
    *step_counter = step + 1;
  }
}

template <typename Parts, bool kForward>
cudaError_t launch_ht_step_kernels(const typename Parts::Params& params, int blocks, cudaStream_t stream) {
  static ResidentBlocks fused_capacity(kHtThreads);
  if (blocks <= fused_capacity.get(ht_step_kernel<Parts, true, true, kForward>, 0)) {
    ht_step_kernel<Parts, true, true, kForward><<<blocks, kHtThreads, 0, stream>>>(params);
    return cudaGetLastError();
  }
  ht_step_kernel<Parts, true, false, kForward><<<blocks, kHtThreads, 0, stream>>>(params);
  const cudaError_t sent = cudaGetLastError();
  if (sent != cudaSuccess) return sent;
  ht_step_kernel<Parts, false, true, kForward><<<blocks, kHtThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

template <typename Parts>
cudaError_t launch_ht_step(const typename Parts::Params& params, int blocks, cudaStream_t stream) {
  return params.common.forward_warps > 0 ? launch_ht_step_kernels<Parts, true>(params, blocks, stream)
                                         : launch_ht_step_kernels<Parts, false>(params, blocks, stream);
}

template <typename Parts>
size_t ht_step_local_bytes() {
  return max_local_bytes(ht_step_kernel<Parts, true, true, false>, ht_step_kernel<Parts, true, false, false>,
                         ht_step_kernel<Parts, false, true, false>, ht_step_kernel<Parts, true, true, true>,
                         ht_step_kernel<Parts, true, false, true>, ht_step_kernel<Parts, false, true, true>);
}

}  // namespace epc::kernels
