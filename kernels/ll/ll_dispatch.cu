// SPDX-License-Identifier: Apache-2.0
// Low-latency dispatch kernels: the sending part (ll_dispatch_send.cuh), the receiving part
// (ll_dispatch_recv.cuh), or both in one launch (ll_step_kernel.cuh says when).
#include "kernels/launch.hpp"
#include "kernels/ll/ll_dispatch_recv.cuh"
#include "kernels/ll/ll_dispatch_send.cuh"
#include "kernels/ll/ll_step_kernel.cuh"

namespace epc::kernels {

namespace {

// kByToken: the token layouts (RANK_MAJOR, FLAT) or EXPERT_PADDED, a template argument so
// that each layout's launch carries only its own placement code.
template <bool kByToken>
struct DispatchParts {
  using Params = LlDispatchParams;
  static constexpr int kRecord = kLlDispatchRecord;
  static constexpr uint32_t kSlotPhase = kPhaseLlDispatchSlot;
  __device__ __forceinline__ static LlOpState* op(LlState* s) { return &s->dispatch; }
#ifdef EPC_PHASE_TRACE
  __device__ __forceinline__ static LlPhaseRecord* phase_trace(const LlCommon& c) { return c.phase_trace->dispatch; }
#endif
  using Early = dispatch_send::EarlyLoads;
  __device__ __forceinline__ static Early early(const Params& p) { return dispatch_send::early_loads(p); }
  __device__ __forceinline__ static bool send(const Params& p, uint64_t step, const Early& early) {
    return dispatch_send::run<kByToken>(p, step, early);
  }
  __device__ __forceinline__ static bool receive(const Params& p, uint64_t step) {
    return dispatch_recv::run<kByToken>(p, step);
  }
  // The sending part's [nranks] token places (the token layouts).
  static size_t send_shared(const Params& p) {
    return kByToken ? static_cast<size_t>(p.common.geo.nranks) * sizeof(int) : 0;
  }
  // The receiving part's [nranks] token counts.
  static size_t receive_shared(const Params& p) { return static_cast<size_t>(p.common.geo.nranks) * sizeof(uint32_t); }
};

bool by_token(const LlDispatchParams& p) { return p.common.layout != LlLayout::kExpertPadded; }

}  // namespace

cudaError_t launch_ll_dispatch_send(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  return by_token(params) ? launch_ll_send<DispatchParts<true>>(params, blocks, stream)
                          : launch_ll_send<DispatchParts<false>>(params, blocks, stream);
}

cudaError_t launch_ll_dispatch_recv(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  return by_token(params) ? launch_ll_receive<DispatchParts<true>>(params, blocks, stream)
                          : launch_ll_receive<DispatchParts<false>>(params, blocks, stream);
}

cudaError_t launch_ll_dispatch(const LlDispatchParams& params, int send_blocks, int recv_blocks, cudaStream_t stream) {
  return by_token(params) ? launch_ll_step<DispatchParts<true>>(params, send_blocks, recv_blocks, stream)
                          : launch_ll_step<DispatchParts<false>>(params, send_blocks, recv_blocks, stream);
}

size_t ll_dispatch_local_bytes() {
  const size_t padded = ll_step_local_bytes<DispatchParts<false>>();
  const size_t tokens = ll_step_local_bytes<DispatchParts<true>>();
  return padded > tokens ? padded : tokens;
}

}  // namespace epc::kernels
