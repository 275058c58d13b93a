// SPDX-License-Identifier: Apache-2.0
// The low-latency dispatch as ll_step_kernel.cuh's `Parts`: DispatchParts moves records,
// LineDispatchParts line records (a line step's, ll_dispatch_lines.cuh). Their kernels live
// in two translation units, ll_dispatch.cu and ll_dispatch_lines.cu, so that the line steps'
// kernels leave the module of every other group's kernels as it was.
#pragma once

#include "kernels/ll/ll_dispatch_recv.cuh"
#include "kernels/ll/ll_dispatch_send.cuh"
#include "kernels/ll/ll_step_kernel.cuh"
#include "kernels/wire/shared_bytes.hpp"

namespace epc::kernels {

// kByToken: the token layouts (RANK_MAJOR, FLAT) or EXPERT_PADDED; kPayload: what the
// messages carry (16-bit rows, the fp8 cast, passthrough); kLines: they move as line records
// (dispatch_lines). Template arguments, so that each launch carries only its own layout's
// placement, its own payload's copies and scales and its own way of moving them.
template <bool kByToken, LlPayload kPayload, bool kLines>
struct DispatchPartsOf {
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
  static size_t send_shared(const Params& p) { return ll_dispatch_shared_bytes(p.common.geo.nranks); }
  // The receiving part's [nranks] message counts.
  static size_t receive_shared(const Params& p) { return ll_dispatch_shared_bytes(p.common.geo.nranks); }
  // Small blocks when no block's slice of a row, sent or received, has more vectors than they
  // have threads: a small step (few tokens, rows split over up to kLlMaxMessageSlices blocks)
  // then pays less at each block barrier. A received row is never longer than the sent one.
  // A launch of two blocks per SM (ll_alone_blocks_per_sm) takes small blocks whatever its
  // slices: two of them hold the threads one full block would.
  static int threads(const Params& p) {
    static_assert(kLlAloneBlocksPerSm * kLlSmallThreads <= kLlThreads, "two small blocks fit where one full one did");
    if (p.blocks_per_sm > 1) return kLlSmallThreads;
    const int slices = p.token_slices < p.message_slices ? p.token_slices : p.message_slices;
    const int vectors = (p.x_row_bytes / 16 + slices - 1) / slices;
    return vectors <= kLlSmallThreads ? kLlSmallThreads : kLlThreads;
  }
};

template <bool kByToken, LlPayload kPayload>
struct DispatchParts : DispatchPartsOf<kByToken, kPayload, false> {};
template <bool kByToken, LlPayload kPayload>
struct LineDispatchParts : DispatchPartsOf<kByToken, kPayload, true> {};

// A line step's launches (ll_dispatch_lines.cu), which launch_ll_dispatch_send, _recv and
// launch_ll_dispatch call where dispatch_lines says so; their kernels' largest stack frame.
cudaError_t launch_ll_line_dispatch_send(const LlDispatchParams& params, int blocks, cudaStream_t stream);
cudaError_t launch_ll_line_dispatch_recv(const LlDispatchParams& params, int blocks, cudaStream_t stream);
cudaError_t launch_ll_line_dispatch(const LlDispatchParams& params, int send_blocks, int recv_blocks,
                                    cudaStream_t stream);
size_t ll_line_dispatch_local_bytes();

}  // namespace epc::kernels
