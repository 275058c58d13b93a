// SPDX-License-Identifier: Apache-2.0
// Low-latency dispatch kernels: the sending part (ll_dispatch_send.cuh), the receiving part
// (ll_dispatch_recv.cuh), or both in one launch (ll_step_kernel.cuh says when).
#include "kernels/launch.hpp"
#include "kernels/ll/ll_dispatch_recv.cuh"
#include "kernels/ll/ll_dispatch_send.cuh"
#include "kernels/ll/ll_step_kernel.cuh"

namespace epc::kernels {

namespace {

struct DispatchParts {
  using Params = LlDispatchParams;
  static constexpr int kRecord = kLlDispatchRecord;
  static constexpr uint32_t kSlotPhase = kPhaseLlDispatchSlot;
  __device__ __forceinline__ static LlOpState* op(LlState* s) { return &s->dispatch; }
#ifdef EPC_PHASE_TRACE
  __device__ __forceinline__ static LlPhaseRecord* phase_trace(const LlCommon& c) { return c.phase_trace->dispatch; }
#endif
  __device__ __forceinline__ static bool send(const Params& p, uint64_t step) { return dispatch_send::run(p, step); }
  __device__ __forceinline__ static bool receive(const Params& p, uint64_t step) { return dispatch_recv::run(p, step); }
  static size_t send_shared(const Params&) { return 0; }
  // The receiving part's [nranks] token counts.
  static size_t receive_shared(const Params& p) { return static_cast<size_t>(p.common.geo.nranks) * sizeof(uint32_t); }
};

}  // namespace

cudaError_t launch_ll_dispatch_send(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  return launch_ll_send<DispatchParts>(params, blocks, stream);
}

cudaError_t launch_ll_dispatch_recv(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  return launch_ll_receive<DispatchParts>(params, blocks, stream);
}

cudaError_t launch_ll_dispatch(const LlDispatchParams& params, int send_blocks, int recv_blocks, cudaStream_t stream) {
  return launch_ll_step<DispatchParts>(params, send_blocks, recv_blocks, stream);
}

size_t ll_dispatch_local_bytes() { return ll_step_local_bytes<DispatchParts>(); }

}  // namespace epc::kernels
