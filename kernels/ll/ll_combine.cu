// SPDX-License-Identifier: Apache-2.0
// Low-latency combine kernels: the sending part, the receiving part (ll_combine_parts.cuh),
// or both in one launch (ll_step_kernel.cuh says when).
#include "kernels/launch.hpp"
#include "kernels/ll/ll_combine_parts.cuh"
#include "kernels/ll/ll_step_kernel.cuh"
#include "kernels/wire/shared_bytes.hpp"

namespace epc::kernels {

namespace {

// kHome: EPC_WEIGHTING_HOME (every entry's row returns) or SENDER (one partial per rank), a
// template argument so that each launch carries only its own kind's code; kLines: this rank
// takes its partials back as line records in the step (combine::takes_lines), which only the
// receiving part's code depends on: a receiving part without them is the code it was before
// them, which the larger one slowed at every batch.
template <bool kHome, bool kLines = false>
struct CombineParts {
  static_assert(!kHome || !kLines, "EPC_WEIGHTING_HOME returns rows, not partials");
  using Params = LlCombineParams;
  static constexpr int kRecord = kLlCombineRecord;
  static constexpr uint32_t kSlotPhase = kPhaseLlCombineSlot;
  __device__ __forceinline__ static LlOpState* op(LlState* s) { return &s->combine; }
#ifdef EPC_PHASE_TRACE
  __device__ __forceinline__ static LlPhaseRecord* phase_trace(const LlCommon& c) { return c.phase_trace->combine; }
#endif
  using Early = combine::EarlyLoads;
  template <bool kFused>
  __device__ __forceinline__ static Early early(const Params& p) {
    // The receiving part's own records: a SENDER sum in place (the home sum finds its rows).
    constexpr bool kOwnRecords = combine::kCombineOwnInPlace<kFused> && !kHome;
    return combine::early_loads<kOwnRecords>(p);
  }
  template <bool kFused>
  __device__ __forceinline__ static bool send(const Params& p, uint64_t step, const Early& early) {
    return combine::send<kHome, kFused>(p, step, early);
  }
  template <bool kFused, bool kAlone>
  __device__ __forceinline__ static bool receive(const Params& p, uint64_t step, const Early& early) {
    return combine::receive<kHome, kFused, kAlone, kLines>(p, step, early);
  }
  // The sending part's [nranks] message counts and [nranks] token counts.
  static size_t send_shared(const Params& p) { return ll_combine_shared_bytes(p.common.geo.nranks); }
  static size_t receive_shared(const Params&) { return 0; }
  // Full blocks but at two blocks per SM (ll_alone_blocks_per_sm, whose two small blocks hold
  // a full one's threads): each thread of the sending part loads its vector of every entry's
  // row, so fewer threads keep fewer loads in flight (small blocks measured slower at every
  // batch; docs/tuning.md).
  static int threads(const Params& p) { return p.blocks_per_sm > 1 ? kLlSmallThreads : kLlThreads; }
};

bool home(const LlCombineParams& p) { return p.home_weights != nullptr; }

// combine::takes_lines for this rank's tokens, with combine::line_tokens's conditions.
bool lines(const LlCombineParams& p) {
  const LlCommon& c = p.common;
  return !home(p) && c.transport.one_node && combine::takes_lines(c.num_tokens, c.geo.line_tokens);
}

}  // namespace

cudaError_t launch_ll_combine_send(const LlCombineParams& params, int blocks, cudaStream_t stream) {
  // The sending part's code does not depend on how this rank takes its partials back.
  return home(params) ? launch_ll_send<CombineParts<true>>(params, blocks, stream)
                      : launch_ll_send<CombineParts<false>>(params, blocks, stream);
}

cudaError_t launch_ll_combine_recv(const LlCombineParams& params, int blocks, cudaStream_t stream) {
  return home(params)    ? launch_ll_receive<CombineParts<true>>(params, blocks, stream)
         : lines(params) ? launch_ll_receive<CombineParts<false, true>>(params, blocks, stream)
                         : launch_ll_receive<CombineParts<false>>(params, blocks, stream);
}

cudaError_t launch_ll_combine(const LlCombineParams& params, int send_blocks, int recv_blocks, cudaStream_t stream) {
  return home(params)    ? launch_ll_step<CombineParts<true>>(params, send_blocks, recv_blocks, stream)
         : lines(params) ? launch_ll_step<CombineParts<false, true>>(params, send_blocks, recv_blocks, stream)
                         : launch_ll_step<CombineParts<false>>(params, send_blocks, recv_blocks, stream);
}

size_t ll_combine_local_bytes() {
  const size_t sender = ll_step_local_bytes<CombineParts<false>>();
  const size_t lines = ll_step_local_bytes<CombineParts<false, true>>();
  const size_t home = ll_step_local_bytes<CombineParts<true>>();
  const size_t most = sender > lines ? sender : lines;
  return most > home ? most : home;
}

}  // namespace epc::kernels
