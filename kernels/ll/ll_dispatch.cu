// SPDX-License-Identifier: Apache-2.0
// Low-latency dispatch kernels: the sending part (ll_dispatch_send.cuh), the receiving part
// (ll_dispatch_recv.cuh), or both in one launch (ll_step_kernel.cuh says when).
#include "kernels/launch.hpp"
#include "kernels/ll/ll_dispatch_recv.cuh"
#include "kernels/ll/ll_dispatch_send.cuh"
#include "kernels/ll/ll_step_kernel.cuh"

namespace epc::kernels {

namespace {

// kByToken: the token layouts (RANK_MAJOR, FLAT) or EXPERT_PADDED; kPayload: what the
// messages carry (16-bit rows, the fp8 cast, passthrough); kLines: they move as line records
// (dispatch_lines). Template arguments, so that each launch carries only its own layout's
// placement, its own payload's copies and scales and its own way of moving them.
template <bool kByToken, LlPayload kPayload, bool kLines = false>
struct DispatchParts {
  using Params = LlDispatchParams;
  static constexpr int kRecord = kLlDispatchRecord;
  static constexpr uint32_t kSlotPhase = kPhaseLlDispatchSlot;
  __device__ __forceinline__ static LlOpState* op(LlState* s) { return &s->dispatch; }
#ifdef EPC_PHASE_TRACE
  __device__ __forceinline__ static LlPhaseRecord* phase_trace(const LlCommon& c) { return c.phase_trace->dispatch; }
#endif
  using Early = dispatch_send::EarlyLoads;
  template <bool kFused>
  __device__ __forceinline__ static Early early(const Params& p) {
    return dispatch_send::early_loads(p);
  }
  template <bool kFused>
  __device__ __forceinline__ static bool send(const Params& p, uint64_t step, const Early& early) {
    return dispatch_send::run<kByToken, kPayload, kFused, kLines>(p, step, early);
  }
  template <bool kFused, bool kAlone>
  __device__ __forceinline__ static bool receive(const Params& p, uint64_t step, const Early&) {
    return dispatch_recv::run<kByToken, kPayload, kFused, kAlone, kLines>(p, step);
  }
  // The sending part's [nranks] token places.
  static size_t send_shared(const Params& p) { return static_cast<size_t>(p.common.geo.nranks) * sizeof(int); }
  // The receiving part's [nranks] message counts.
  static size_t receive_shared(const Params& p) { return static_cast<size_t>(p.common.geo.nranks) * sizeof(uint32_t); }
  // Small blocks when no block's slice of a row, sent or received, has more vectors than they
  // have threads: a small step (few tokens, rows split over up to kLlMaxMessageSlices blocks)
  // then pays less at each block barrier. A received row is never longer than the sent one.
  static int threads(const Params& p) {
    const int slices = p.token_slices < p.message_slices ? p.token_slices : p.message_slices;
    const int vectors = (p.x_row_bytes / 16 + slices - 1) / slices;
    return vectors <= kLlSmallThreads ? kLlSmallThreads : kLlThreads;
  }
};

// Calls `launch` with the DispatchParts of p's layout and payload, moving line records when
// `lines` (never passthrough rows: dispatch_lines).
template <bool kByToken, LlPayload kPayload, typename Launch>
cudaError_t with_lines(bool lines, Launch&& launch) {
  return lines ? launch(DispatchParts<kByToken, kPayload, true>{}) : launch(DispatchParts<kByToken, kPayload>{});
}
template <typename Launch>
cudaError_t with_parts(const LlDispatchParams& p, bool lines, Launch&& launch) {
  const bool by_token = p.common.layout != LlLayout::kExpertPadded;
  switch (p.payload) {
    case LlPayload::kFp8:
      return by_token ? with_lines<true, LlPayload::kFp8>(lines, launch)
                      : with_lines<false, LlPayload::kFp8>(lines, launch);
    case LlPayload::kPassthrough:
      return by_token ? launch(DispatchParts<true, LlPayload::kPassthrough>{})
                      : launch(DispatchParts<false, LlPayload::kPassthrough>{});
    default:
      return by_token ? with_lines<true, LlPayload::kHalf>(lines, launch)
                      : with_lines<false, LlPayload::kHalf>(lines, launch);
  }
}

// Whether p's launches move line records; a fused launch alone in its group moves nothing, and
// its kernel (or, where it does not fit, its two parts) is the one of other groups.
bool moves_lines(const LlDispatchParams& p, bool fused) {
  return dispatch_lines(p.common, p.payload) && !(fused && fused_launch_alone(p.common.geo));
}

template <bool kByToken>
size_t local_bytes() {
  const size_t sizes[] = {ll_step_local_bytes<DispatchParts<kByToken, LlPayload::kHalf>>(),
                          ll_step_local_bytes<DispatchParts<kByToken, LlPayload::kHalf, true>>(),
                          ll_step_local_bytes<DispatchParts<kByToken, LlPayload::kFp8>>(),
                          ll_step_local_bytes<DispatchParts<kByToken, LlPayload::kFp8, true>>(),
                          ll_step_local_bytes<DispatchParts<kByToken, LlPayload::kPassthrough>>()};
  size_t most = 0;
  for (const size_t s : sizes) most = s > most ? s : most;
  return most;
}

}  // namespace

cudaError_t launch_ll_dispatch_send(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  return with_parts(params, moves_lines(params, false),
                    [&](auto parts) { return launch_ll_send<decltype(parts)>(params, blocks, stream); });
}

cudaError_t launch_ll_dispatch_recv(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  return with_parts(params, moves_lines(params, false),
                    [&](auto parts) { return launch_ll_receive<decltype(parts)>(params, blocks, stream); });
}

cudaError_t launch_ll_dispatch(const LlDispatchParams& params, int send_blocks, int recv_blocks, cudaStream_t stream) {
  return with_parts(params, moves_lines(params, true), [&](auto parts) {
    return launch_ll_step<decltype(parts)>(params, send_blocks, recv_blocks, stream);
  });
}

size_t ll_dispatch_local_bytes() {
  const size_t padded = local_bytes<false>();
  const size_t tokens = local_bytes<true>();
  return padded > tokens ? padded : tokens;
}

}  // namespace epc::kernels
