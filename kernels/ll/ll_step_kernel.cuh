// SPDX-License-Identifier: Apache-2.0
// One launch per low-latency operation when it can be: the sending and receiving parts of a
// dispatch (or combine) as one kernel saves a launch and the gap between two kernels. The
// receiving part spins until every peer has sent, so the fused kernel is only launched when
// all its blocks can be resident at once (else a waiting block could keep a sending block
// of the same launch off the GPU until the timeout); otherwise the two parts run as two
// kernels, as they always do for EPC_STEP_SEND_ONLY.
//
// `Parts` names an operation: its parameter struct (Params), its step counter and receive
// completion counter in LlState (step_counter, receive_done), its phase-trace ring
// (phase_trace, -Dphase_trace=true builds), its two parts (send, receive, run by every
// thread of every block, given the step the launch serves; receive returns in every thread
// of a block whether the block saw every peer's signal) and the dynamic shared memory each
// needs (send_shared, receive_shared).
//
// Every block reads the step once, at its start, and a receiving launch moves the counter on
// once no block of it will read it again (finish_step). In a fused launch every block has read
// it before the sending part's completion count, which the peers' signals follow, so block 0,
// which has seen every signal, moves it; a receive-only launch counts its blocks first. A
// failed wait leaves it: the group is failed.
#pragma once

#include <cuda_runtime.h>

#include "kernels/common/kernel_stack.hpp"
#include "kernels/common/resident_blocks.hpp"
#include "kernels/device/launch_done.cuh"
#ifdef EPC_PHASE_TRACE
#include "kernels/device/phase_stamp.cuh"
#endif
#include "kernels/wire/ll_state.hpp"

namespace epc::kernels {

constexpr int kLlThreads = 512;

// Called by every thread of every block of a receiving launch after its receiving part.
template <typename Parts>
__device__ __forceinline__ void finish_step(const typename Parts::Params& p, uint64_t step, bool fused, bool received) {
  LlState* state = p.common.state;
  if (!received) return;
  // Only the step counter follows, read by this GPU's next launches: GPU-scope fences.
  const bool last = fused ? blockIdx.x == 0 : last_block_to_finish(Parts::receive_done(state), false);
  if (!last || threadIdx.x != 0) return;
#ifdef EPC_PHASE_TRACE
  stamp_phase(Parts::phase_trace(p.common), step, kLlPhaseReceiveDone);
#endif
  *Parts::step_counter(state) = step + 1;
}

template <typename Parts, bool kSend, bool kReceive>
__global__ void __launch_bounds__(kLlThreads, 1) ll_step_kernel(typename Parts::Params p) {
  const uint64_t step = *Parts::step_counter(p.common.state);
  if (kSend) Parts::send(p, step);
  if (kReceive) finish_step<Parts>(p, step, /*fused=*/kSend, Parts::receive(p, step));
}

template <typename Parts>
cudaError_t launch_ll_send(const typename Parts::Params& params, int blocks, cudaStream_t stream) {
  ll_step_kernel<Parts, true, false><<<blocks, kLlThreads, Parts::send_shared(params), stream>>>(params);
  return cudaGetLastError();
}

template <typename Parts>
cudaError_t launch_ll_receive(const typename Parts::Params& params, int blocks, cudaStream_t stream) {
  ll_step_kernel<Parts, false, true><<<blocks, kLlThreads, Parts::receive_shared(params), stream>>>(params);
  return cudaGetLastError();
}

// Both parts: fused over the larger of the two block counts when it fits, else one after
// the other.
template <typename Parts>
cudaError_t launch_ll_step(const typename Parts::Params& params, int send_blocks, int receive_blocks,
                           cudaStream_t stream) {
  const int blocks = send_blocks > receive_blocks ? send_blocks : receive_blocks;
  const size_t send_shared = Parts::send_shared(params), receive_shared = Parts::receive_shared(params);
  const size_t shared = send_shared > receive_shared ? send_shared : receive_shared;
  static ResidentBlocks fused_capacity(kLlThreads);
  if (blocks <= fused_capacity.get(ll_step_kernel<Parts, true, true>, shared)) {
    ll_step_kernel<Parts, true, true><<<blocks, kLlThreads, shared, stream>>>(params);
    return cudaGetLastError();
  }
  const cudaError_t sent = launch_ll_send<Parts>(params, send_blocks, stream);
  return sent != cudaSuccess ? sent : launch_ll_receive<Parts>(params, receive_blocks, stream);
}

template <typename Parts>
size_t ll_step_local_bytes() {
  return max_local_bytes(ll_step_kernel<Parts, true, true>, ll_step_kernel<Parts, true, false>,
                         ll_step_kernel<Parts, false, true>);
}

}  // namespace epc::kernels
