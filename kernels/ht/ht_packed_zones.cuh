// SPDX-License-Identifier: Apache-2.0
// EXPERT_PACKED dispatch: where this rank's own rows of each local expert start, from the
// layout's `expert_base` and `source_starts` (kernels/ht/ht_layout.cu), in a copy in the
// block's shared memory. A rank's own tokens know each entry's expert, and sending warps copy
// one token after another, so every load before a token's copy lies on the step's path: an
// own entry's row is then its place plus one shared word. Rows from peers' slots search the
// handle's arrays (packed_row_of, ht_packed_rows.cuh), whose few starts per source stay in
// cache: a copy of every source's starts for that search measured slower on two ranks
// (bench/results/two_ranks_session26_2xh200.md).
#pragma once

#include <cstdint>

#include "kernels/wire/ht_params.hpp"

namespace epc::kernels {

// Local experts up to which a dispatch block keeps its own rows' zone shifts in shared memory;
// more read the handle's arrays.
constexpr int kPackedSharedExperts = 2048;

__host__ __device__ __forceinline__ bool packed_own_shifts_fit(const HtGeometry& g) {
  return g.local_experts <= kPackedSharedExperts;
}

// Per local expert l: where this rank's own rows of l start in the output, less where its
// entries of l start among its entries for itself.
__device__ __forceinline__ int32_t* packed_own_shifts() {
  __shared__ int32_t shifts[kPackedSharedExperts];
  return shifts;
}

// Called by every thread of the block before any of them reads the shifts (it ends in a
// barrier): the block's copy, where it fits.
__device__ __forceinline__ void load_packed_own_shifts(const HtCommon& c) {
  if (!packed_own_shifts_fit(c.geo)) return;
  const int L = c.geo.local_experts, s = c.geo.rank;
  int32_t* shifts = packed_own_shifts();
  for (int l = threadIdx.x; l < L; l += blockDim.x)
    shifts[l] = c.handle.expert_base[s * L + l] - c.handle.source_starts[s * (L + 1) + l];
  __syncthreads();
}

}  // namespace epc::kernels
