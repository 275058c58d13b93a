// SPDX-License-Identifier: Apache-2.0
// The layout of a handle whose steps run in parts (core/ht/ht_parts.hpp), once every part's
// layout kernel has run. FLAT: part k's rows from source s go behind the rows s sent in parts
// 0 .. k - 1, and all of s's rows behind those of the lower sources, so that out_x holds the
// whole step's rows in the reference order (source rank, source token) whatever part carried
// them. EXPERT_PACKED: the zones are the whole step's (each expert's entries of every part,
// aligned), and in zone l part k's rows from source s go behind s's rows of l in the parts
// before, behind the rows of lower sources: the order (source rank, source token, slot). Every
// part's counts, zone offsets and recv_base[R] become the whole step's (what dispatch reports,
// and where EXPERT_PACKED padding starts). One block, a thread per source or per expert.
#include "kernels/launch.hpp"
#include "kernels/wire/shared_bytes.hpp"

namespace epc::kernels {

namespace {

constexpr int kPartsThreads = 256;

// FLAT rows: recv_base of every part. `source_base` [R + 1] (shared).
__device__ void place_rows(const HtPartsLayout& p, int32_t* source_base) {
  const int R = p.nranks;
  for (int s = threadIdx.x; s < R; s += blockDim.x) {
    int32_t rows = 0;
    for (int k = 0; k < p.parts; ++k) rows += p.recv_count[k * p.recv_count_stride + s];
    source_base[s + 1] = rows;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    source_base[0] = 0;
    for (int s = 0; s < R; ++s) source_base[s + 1] += source_base[s];
  }
  __syncthreads();
  for (int s = threadIdx.x; s <= R; s += blockDim.x) {
    int32_t base = source_base[s];
    for (int k = 0; k < p.parts; ++k) {
      p.recv_base[k * p.recv_base_stride + s] = s < R ? base : source_base[R];
      if (s < R) base += p.recv_count[k * p.recv_count_stride + s];
    }
  }
}

// EXPERT_PACKED rows: expert_base of every part, from the parts' own zones (read before any
// is rewritten) and the whole step's zone offsets `zones` [L + 1] (shared).
__device__ void place_entries(const HtPartsLayout& p, const int32_t* zones) {
  const int R = p.nranks, L = p.local_experts;
  for (int l = threadIdx.x; l < L; l += blockDim.x) {
    int32_t base = zones[l];
    for (int s = 0; s < R; ++s) {
      for (int k = 0; k < p.parts; ++k) {
        int32_t* own = p.expert_base + k * p.expert_base_stride;
        // Part k's rows of (s, l): up to the next source's start, or the zone's end.
        const int32_t end = s + 1 < R ? own[(s + 1) * L + l]
                                      : p.expert_offsets[k * p.expert_offsets_stride + l] +
                                            p.expert_counts[k * p.expert_counts_stride + l];
        const int32_t rows = end - own[s * L + l];
        own[s * L + l] = base;
        base += rows;
      }
    }
  }
}

__global__ void __launch_bounds__(kPartsThreads) ht_parts_layout_kernel(const HtPartsLayout p) {
  extern __shared__ int32_t shared[];
  const int R = p.nranks, L = p.local_experts;
  int32_t* source_base = shared;     // [R + 1]
  int32_t* totals = shared + R + 1;  // [L]: each expert's entries (FLAT: rows) of the step
  int32_t* zones = totals + L;       // [L + 1]: EXPERT_PACKED zone offsets of the step
  place_rows(p, source_base);
  for (int l = threadIdx.x; l < L; l += blockDim.x) {
    int32_t sum = 0;
    for (int k = 0; k < p.parts; ++k) sum += p.expert_counts[k * p.expert_counts_stride + l];
    totals[l] = sum;
  }
  __syncthreads();
  if (p.alignment > 0) {
    if (threadIdx.x == 0) {
      int32_t offset = 0;
      for (int l = 0; l < L; ++l) {
        zones[l] = offset;
        offset += (totals[l] + p.alignment - 1) / p.alignment * p.alignment;
      }
      zones[L] = offset;
    }
    __syncthreads();
    place_entries(p, zones);
    __syncthreads();  // every part's own zones were read
  }
  for (int k = 0; k < p.parts; ++k) {
    for (int l = threadIdx.x; l <= L; l += blockDim.x) {
      if (l < L) p.expert_counts[k * p.expert_counts_stride + l] = totals[l];
      if (p.alignment > 0) p.expert_offsets[k * p.expert_offsets_stride + l] = zones[l];
    }
  }
}

}  // namespace

cudaError_t launch_ht_parts_layout(const HtPartsLayout& params, cudaStream_t stream) {
  const size_t shared = ht_parts_layout_shared_bytes(params.nranks, params.local_experts);
  ht_parts_layout_kernel<<<1, kPartsThreads, shared, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace epc::kernels
