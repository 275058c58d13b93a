// SPDX-License-Identifier: Apache-2.0
#include "bench/baseline_kernels.hpp"

namespace epc::bench {
namespace {

constexpr int kThreads = 256;

__global__ void histogram(const int32_t* values, int n, int per_row, int row_stride, int first, int bins,
                          int32_t* counts) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int v = values[static_cast<size_t>(i / per_row) * row_stride + i % per_row] - first;
    if (v >= 0 && v < bins) atomicAdd(&counts[v], 1);
  }
}

// One block per row; Vector is int4 (16 bytes) or int (4 bytes).
template <typename Vector>
__global__ void gather_rows(const Vector* x, const int32_t* src_token, int vectors, Vector* out) {
  const int row = blockIdx.x;
  const Vector* src = x + static_cast<size_t>(src_token[row]) * vectors;
  Vector* dst = out + static_cast<size_t>(row) * vectors;
  for (int v = threadIdx.x; v < vectors; v += blockDim.x) dst[v] = src[v];
}

__device__ float bf16_to_float(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

__device__ uint16_t float_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) return 0x7FC0;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// One block per token, 8 channels (16 bytes) per thread and step.
__global__ void weighted_sum(const uint16_t* rows, const int32_t* pos, const float* weights, int topk, int hidden,
                             uint16_t* out) {
  const int t = blockIdx.x;
  const int vectors = hidden / 8;
  for (int v = threadIdx.x; v < vectors; v += blockDim.x) {
    float acc[8] = {};
    for (int k = 0; k < topk; ++k) {
      const int p = pos[t * topk + k];
      if (p < 0) continue;
      const float w = weights[t * topk + k];
      union {
        int4 raw;
        uint16_t h[8];
      } in;
      in.raw = reinterpret_cast<const int4*>(rows + static_cast<size_t>(p) * hidden)[v];
      for (int e = 0; e < 8; ++e) acc[e] += w * bf16_to_float(in.h[e]);
    }
    union {
      int4 raw;
      uint16_t h[8];
    } res;
    for (int e = 0; e < 8; ++e) res.h[e] = float_to_bf16(acc[e]);
    reinterpret_cast<int4*>(out + static_cast<size_t>(t) * hidden)[v] = res.raw;
  }
}

unsigned blocks_for(int n) {
  const int b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 1024 ? 1024 : b));
}

}  // namespace

cudaError_t launch_histogram(const int32_t* values, int rows, int per_row, int row_stride, int first, int bins,
                             int32_t* counts, cudaStream_t stream) {
  cudaError_t c = cudaMemsetAsync(counts, 0, static_cast<size_t>(bins) * sizeof(int32_t), stream);
  if (c != cudaSuccess) return c;
  const int n = rows * per_row;
  if (n > 0) {
    histogram<<<blocks_for(n), kThreads, 0, stream>>>(values, n, per_row, row_stride, first, bins, counts);
  }
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(const void* x, const int32_t* src_token, int rows, int row_bytes, void* out,
                               cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const bool wide =
      row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (wide) {
    gather_rows<int4><<<rows, kThreads, 0, stream>>>(static_cast<const int4*>(x), src_token, row_bytes / 16,
                                                     static_cast<int4*>(out));
  } else {
    gather_rows<int>
        <<<rows, kThreads, 0, stream>>>(static_cast<const int*>(x), src_token, row_bytes / 4, static_cast<int*>(out));
  }
  return cudaGetLastError();
}

cudaError_t launch_weighted_sum(const uint16_t* rows, const int32_t* pos, const float* weights, int tokens, int topk,
                                int hidden, uint16_t* out, cudaStream_t stream) {
  if (tokens > 0) weighted_sum<<<tokens, kThreads, 0, stream>>>(rows, pos, weights, topk, hidden, out);
  return cudaGetLastError();
}

}  // namespace epc::bench
