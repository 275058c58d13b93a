// SPDX-License-Identifier: Apache-2.0
// The layout of a handle whose steps run in parts (core/ht/ht_parts.hpp), once every part's
// layout kernel has run: part k's rows from source s go behind the rows s sent in parts
// 0 .. k - 1, and all of s's rows behind those of the lower sources, so that out_x holds the
// whole step's rows in the reference order (source rank, source token) whatever part carried
// them. One block: a thread per source sums its rows over the parts, one thread scans the
// sources, a thread per source writes its base in every part; then the last part's expert
// counts become the whole step's (what dispatch reports), and every part's recv_base[R] the
// whole step's row count.
#include "kernels/launch.hpp"

namespace epc::kernels {

namespace {

constexpr int kPartsThreads = 256;

__global__ void __launch_bounds__(kPartsThreads) ht_parts_layout_kernel(const HtPartsLayout p) {
  extern __shared__ int32_t source_base[];  // [R + 1]: where each source's rows start
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
  int32_t* total = p.expert_counts + (p.parts - 1) * p.expert_counts_stride;
  for (int l = threadIdx.x; l < p.local_experts; l += blockDim.x) {
    for (int k = 0; k + 1 < p.parts; ++k) total[l] += p.expert_counts[k * p.expert_counts_stride + l];
  }
}

}  // namespace

cudaError_t launch_ht_parts_layout(const HtPartsLayout& params, cudaStream_t stream) {
  const size_t shared = (static_cast<size_t>(params.nranks) + 1) * sizeof(int32_t);
  ht_parts_layout_kernel<<<1, kPartsThreads, shared, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace epc::kernels
