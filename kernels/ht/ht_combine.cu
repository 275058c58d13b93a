// SPDX-License-Identifier: Apache-2.0
// High-throughput combine: the sending part (ht_combine_send.cuh), across nodes the reducing
// part (ht_combine_forward.cuh), and the receiving part (ht_combine_recv.cuh), launched as
// ht_step_kernel.cuh says.
#include "kernels/ht/ht_combine_forward.cuh"
#include "kernels/ht/ht_combine_recv.cuh"
#include "kernels/ht/ht_combine_send.cuh"
#include "kernels/ht/ht_step_kernel.cuh"
#include "kernels/launch.hpp"

namespace epc::kernels {

namespace {

// kPacked: the EXPERT_PACKED kernels (one node only). The parts take it as a template flag,
// so FLAT kernels, one node or several, carry none of that code.
template <bool kPackedLayout>
struct CombineParts {
  using Params = HtCombineParams;
  static constexpr bool kPacked = kPackedLayout;
  __device__ static uint64_t* step_counter(HtState* s) { return &s->combine_step; }
  __device__ static uint32_t* done_counter(HtState* s) { return &s->combine_done; }
  __device__ static void prologue(const Params&) {}
  __device__ static void send(const Params& p, uint64_t step, const WarpRole& r) {
    ht_combine_send::run<kPacked>(p, step, r);
  }
  __device__ static void receive(const Params& p, uint64_t step, const WarpRole& r) {
    ht_combine_recv::run<kPacked>(p, step, r);
  }
  __device__ static void forward(const Params& p, uint64_t step, const WarpRole& r) {
    ht_combine_forward::run(p, step, r);
  }
};

}  // namespace

cudaError_t launch_ht_combine(const HtCombineParams& params, int blocks, cudaStream_t stream, HtHalves halves) {
  return params.packed ? launch_ht_step<CombineParts<true>>(params, blocks, halves, stream)
                       : launch_ht_step<CombineParts<false>>(params, blocks, halves, stream);
}

// Ending a step reads no layout: the FLAT instantiation serves both layouts.
cudaError_t launch_ht_combine_abandon(const HtCombineParams& params, cudaStream_t stream) {
  return launch_ht_abandon<CombineParts<false>>(params, stream);
}

size_t ht_combine_local_bytes() { return ht_step_local_bytes<CombineParts<false>>(); }

}  // namespace epc::kernels
