// SPDX-License-Identifier: Apache-2.0
// EXPERT_PACKED dispatch: where each source's entries and rows of each local expert start, as
// the layout left them in the handle (`source_starts` [R][L + 1], `expert_base` [R][L],
// kernels/ht/ht_layout.cu), read from a copy in the block's shared memory where both fit.
// Every row a dispatch writes is found from them (packed_row_of, ht_packed_rows.cuh): a
// rank's own tokens with two loads after their routing, rows from peers' slots after a binary
// search over the source's starts, log2(L + 1) dependent loads. Warps copy their rows one
// after another, so those loads lie on the step's path, and a shared load takes a fraction of
// a global one.
#pragma once

#include <cstdint>

#include "kernels/wire/ht_params.hpp"

namespace epc::kernels {

// Shared 32-bit words a dispatch block gives the copy: R * (L + 1) starts and R * L bases,
// about twice the expert count. Larger groups read the handle's arrays.
constexpr int kPackedZoneWords = 4096;

struct PackedZones {
  const int32_t* starts;  // [R][L + 1]: where source s's entries of local expert l start among
                          // its entries for this rank (l = L: their count)
  const int32_t* base;    // [R][L]: where source s's rows of local expert l start in the output
  int L;

  // R * (L + 1) is at most the expert count plus the rank count: int indices.
  __device__ int start(int source, int l) const { return starts[source * (L + 1) + l]; }
  __device__ int zone_base(int source, int l) const { return base[source * L + l]; }
};

__device__ __forceinline__ bool packed_zones_fit(const HtGeometry& g) {
  return static_cast<int64_t>(g.nranks) * (2 * g.local_experts + 1) <= kPackedZoneWords;
}

__device__ __forceinline__ int32_t* packed_zone_words() {
  __shared__ int32_t words[kPackedZoneWords];
  return words;
}

// Called by every thread of the block before any of them reads the zones (it ends in a
// barrier): the block's copy, where it fits.
__device__ __forceinline__ void load_packed_zones(const HtCommon& c) {
  if (!packed_zones_fit(c.geo)) return;
  const int starts = c.geo.nranks * (c.geo.local_experts + 1), bases = c.geo.nranks * c.geo.local_experts;
  int32_t* words = packed_zone_words();
  for (int i = threadIdx.x; i < starts; i += blockDim.x) words[i] = c.handle.source_starts[i];
  for (int i = threadIdx.x; i < bases; i += blockDim.x) words[starts + i] = c.handle.expert_base[i];
  __syncthreads();
}

// The block's copy of the zones (packed_zones_fit), and the handle's.
__device__ __forceinline__ PackedZones shared_packed_zones(const HtGeometry& g) {
  const int32_t* words = packed_zone_words();
  return PackedZones{words, words + g.nranks * (g.local_experts + 1), g.local_experts};
}

__device__ __forceinline__ PackedZones handle_packed_zones(const HtCommon& c) {
  return PackedZones{c.handle.source_starts, c.handle.expert_base, c.geo.local_experts};
}

}  // namespace epc::kernels
