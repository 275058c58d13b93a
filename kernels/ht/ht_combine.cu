// SPDX-License-Identifier: Apache-2.0
// High-throughput combine: the sending part (ht_combine_send.cuh), across nodes the reducing
// part (ht_combine_forward.cuh), and the receiving part (ht_combine_recv.cuh), launched as
// ht_step_kernel.cuh says.
#include <algorithm>

#include "kernels/ht/ht_combine_forward.cuh"
#include "kernels/ht/ht_combine_recv.cuh"
#include "kernels/ht/ht_combine_rings.cuh"
#include "kernels/ht/ht_combine_send.cuh"
#include "kernels/ht/ht_step_kernel.cuh"
#include "kernels/launch.hpp"

namespace epc::kernels {

namespace {

// kKind: which combine (HtCombineKind); kRings: FLAT rows returned through the node's credit
// rings (ht_combine_rings.cuh; one node only). The parts take them as template arguments, so
// FLAT kernels, one node or several, carry none of the EXPERT_PACKED or ring code, and the
// per-(token, rank) kernels none of the per-entry code.
template <HtCombineKind kKind, bool kRingsTransport = false>
struct CombineParts {
  using Params = HtCombineParams;
  static constexpr bool kPacked = kKind != HtCombineKind::kFlat;
  static constexpr bool kRings = kRingsTransport;
  static constexpr bool kOneNode = kRings;
  static_assert(!(kPacked && kRings), "rings serve the FLAT layout");
  __device__ static uint64_t* step_counter(HtState* s) { return &s->combine_step; }
  __device__ static uint32_t* done_counter(HtState* s) { return &s->combine_done; }
  __device__ static void prologue(const Params&) {}
  __device__ static void send_prologue(const Params&) {}
  __device__ static void send(const Params& p, uint64_t step, const WarpRole& r) {
    if constexpr (kRings) {
      ht_combine_rings::send(p, step, r);
    } else {
      ht_combine_send::run<kKind>(p, step, r);
    }
  }
  __device__ static void receive(const Params& p, uint64_t step, const WarpRole& r) {
    if constexpr (kRings) {
      ht_combine_rings::receive(p, step, r);
    } else {
      ht_combine_recv::run<kKind>(p, step, r);
    }
  }
  __device__ static void forward(const Params& p, uint64_t step, const WarpRole& r) {
    ht_combine_forward::run<kKind>(p, step, r);
  }
};

}  // namespace

cudaError_t launch_ht_combine(const HtCombineParams& params, int blocks, cudaStream_t stream, HtHalves halves) {
  if (params.rings.capacity > 0) {
    // The readers spin on rings the writers of the same launch fill (the handle checks).
    if (halves != HtHalves::kBoth || blocks > ht_combine_rings_fused_blocks()) return cudaErrorInvalidConfiguration;
    return launch_ht_step<CombineParts<HtCombineKind::kFlat, true>>(params, blocks, halves, stream);
  }
  if (!params.packed) return launch_ht_step<CombineParts<HtCombineKind::kFlat>>(params, blocks, halves, stream);
  if (params.home_weights != nullptr) {
    return launch_ht_step<CombineParts<HtCombineKind::kPackedHome>>(params, blocks, halves, stream);
  }
  if (params.lone_rows) {
    return launch_ht_step<CombineParts<HtCombineKind::kPackedLone>>(params, blocks, halves, stream);
  }
  return launch_ht_step<CombineParts<HtCombineKind::kPacked>>(params, blocks, halves, stream);
}

// Ending a step reads no layout: the FLAT instantiation serves both layouts.
cudaError_t launch_ht_combine_abandon(const HtCombineParams& params, cudaStream_t stream) {
  return launch_ht_abandon<CombineParts<HtCombineKind::kFlat>>(params, stream);
}

int ht_combine_rings_fused_blocks() { return ht_fused_blocks<CombineParts<HtCombineKind::kFlat, true>>(); }

size_t ht_combine_local_bytes() {
  return std::max({ht_step_local_bytes<CombineParts<HtCombineKind::kFlat>>(),
                   ht_step_local_bytes<CombineParts<HtCombineKind::kPacked>>(),
                   ht_step_local_bytes<CombineParts<HtCombineKind::kPackedLone>>(),
                   ht_step_local_bytes<CombineParts<HtCombineKind::kPackedHome>>(),
                   ht_step_local_bytes<CombineParts<HtCombineKind::kFlat, true>>()});
}

}  // namespace epc::kernels
