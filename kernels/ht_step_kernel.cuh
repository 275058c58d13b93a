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

template <typename Parts, bool kSend, bool kReceive>
__global__ void __launch_bounds__(kHtThreads) ht_step_kernel(typename Parts::Params p) {
  const HtCommon& c = p.common;
  uint64_t* step_counter = Parts::step_counter(c.state);
  const uint64_t step = *step_counter;
  const WarpRole role = warp_role<kSend, kReceive>(c.send_warps, c.forward_warps);
  if (kReceive) Parts::prologue(p);
  if (role.kind == HtRole::kSend) {
    Parts::send(p, step, role);
  } else if (role.kind == HtRole::kForward) {
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

template <typename Parts>
cudaError_t launch_ht_step(const typename Parts::Params& params, int blocks, cudaStream_t stream) {
  static ResidentBlocks fused_capacity(kHtThreads);
  if (blocks <= fused_capacity.get(ht_step_kernel<Parts, true, true>, 0)) {
    ht_step_kernel<Parts, true, true><<<blocks, kHtThreads, 0, stream>>>(params);
    return cudaGetLastError();
  }
  ht_step_kernel<Parts, true, false><<<blocks, kHtThreads, 0, stream>>>(params);
  const cudaError_t sent = cudaGetLastError();
  if (sent != cudaSuccess) return sent;
  ht_step_kernel<Parts, false, true><<<blocks, kHtThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

template <typename Parts>
size_t ht_step_local_bytes() {
  return max_local_bytes(ht_step_kernel<Parts, true, true>, ht_step_kernel<Parts, true, false>,
                         ht_step_kernel<Parts, false, true>);
}

}  // namespace epc::kernels
