// SPDX-License-Identifier: Apache-2.0
// Freeing a low-latency slot whose step this rank will never receive: the handle that sent it
// was destroyed with the step pending. Nothing reads the slot for that step any more, so the
// sources may write it again: the credits a receive would have given (ll_slot_credit.cuh).
#include "kernels/launch.hpp"
#include "kernels/ll/ll_slot_credit.cuh"

namespace epc::kernels {

namespace {

__global__ void ll_slot_release_kernel(LlSlotReleaseParams p) {
  const uint64_t epoch = p.op->slot_epoch[p.slot];  // the slot's last step + 1
  if (epoch == 0) return;
  warp_give_slot_credits(p.transport, p.signal_offset, p.nranks, p.rank, epoch - 1);
}

}  // namespace

cudaError_t launch_ll_slot_release(const LlSlotReleaseParams& params, cudaStream_t stream) {
  ll_slot_release_kernel<<<1, kWarpSize, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace epc::kernels
