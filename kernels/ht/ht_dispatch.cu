// SPDX-License-Identifier: Apache-2.0
// High-throughput dispatch: the sending part (ht_dispatch_send.cuh), across nodes the
// forwarding part (ht_dispatch_forward.cuh), and the receiving part (ht_dispatch_recv.cuh),
// launched as ht_step_kernel.cuh says.
#include <algorithm>

#include "kernels/ht/ht_dispatch_forward.cuh"
#include "kernels/ht/ht_dispatch_recv.cuh"
#include "kernels/ht/ht_dispatch_rings.cuh"
#include "kernels/ht/ht_dispatch_send.cuh"
#include "kernels/ht/ht_step_kernel.cuh"
#include "kernels/launch.hpp"

namespace epc::kernels {

namespace {

// kPacked: the EXPERT_PACKED kernels; kRings: the FLAT kernels whose rows travel through
// the node's credit rings (ht_dispatch_rings.cuh; one node only). The parts take them as
// template flags, so that the other kernels carry none of that code.
template <bool kPackedLayout, bool kRingsTransport = false>
struct DispatchParts {
  using Params = HtDispatchParams;
  static constexpr bool kPacked = kPackedLayout;
  static constexpr bool kRings = kRingsTransport;
  static constexpr bool kOneNode = kRings;
  static_assert(!(kPacked && kRings), "rings serve the FLAT layout");
  __device__ static uint64_t* step_counter(HtState* s) { return &s->dispatch_step; }
  __device__ static uint32_t* done_counter(HtState* s) { return &s->dispatch_done; }
  __device__ static void prologue(const Params& p) { ht_dispatch_recv::prologue<kPacked>(p); }
  __device__ static void send_prologue(const Params& p) {
    if constexpr (kPacked) load_packed_own_shifts(p.common);
  }
  __device__ static void send(const Params& p, uint64_t step, const WarpRole& r) {
    if constexpr (kRings) {
      ht_dispatch_rings::send(p, step, r);
    } else {
      ht_dispatch_send::run<kPacked>(p, step, r);
    }
  }
  __device__ static void receive(const Params& p, uint64_t step, const WarpRole& r) {
    if constexpr (kRings) {
      ht_dispatch_rings::receive(p, step, r);
    } else {
      ht_dispatch_recv::run<kPacked>(p, step, r);
    }
  }
  __device__ static void forward(const Params& p, uint64_t step, const WarpRole& r) {
    ht_dispatch_forward::run<kPacked>(p, step, r);
  }
};

}  // namespace

cudaError_t launch_ht_dispatch(const HtDispatchParams& params, int blocks, cudaStream_t stream, HtHalves halves) {
  if (params.rings.capacity > 0) {
    // The readers spin on rings the writers of the same launch fill (the handle checks).
    if (halves != HtHalves::kBoth || blocks > ht_dispatch_rings_fused_blocks()) return cudaErrorInvalidConfiguration;
    return launch_ht_step<DispatchParts<false, true>>(params, blocks, halves, stream);
  }
  return params.packed ? launch_ht_step<DispatchParts<true>>(params, blocks, halves, stream)
                       : launch_ht_step<DispatchParts<false>>(params, blocks, halves, stream);
}

int ht_dispatch_rings_fused_blocks() { return ht_fused_blocks<DispatchParts<false, true>>(); }

// Ending a step reads no layout: the FLAT instantiation serves both layouts.
cudaError_t launch_ht_dispatch_abandon(const HtDispatchParams& params, cudaStream_t stream) {
  return launch_ht_abandon<DispatchParts<false>>(params, stream);
}

size_t ht_dispatch_local_bytes() {
  const size_t flat = ht_step_local_bytes<DispatchParts<false>>();
  const size_t packed = ht_step_local_bytes<DispatchParts<true>>();
  const size_t rings = ht_step_local_bytes<DispatchParts<false, true>>();
  return std::max({flat, packed, rings});
}

}  // namespace epc::kernels
