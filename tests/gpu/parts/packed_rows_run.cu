// SPDX-License-Identifier: Apache-2.0
#include "tests/gpu/parts/packed_rows_run.hpp"

#include <cuda_runtime.h>

#include <cstring>

#include "kernels/ht/ht_packed_rows.cuh"

namespace epc::gputest::parts {
namespace {

constexpr int kThreads = 1024;  // as an HT step kernel's blocks

struct PackedRowsParams {
  kernels::HtCommon common;
  const PackedRowQuery* queries;
  int count;
  int32_t* rows;
};

__global__ void __launch_bounds__(kThreads) packed_rows_kernel(PackedRowsParams p) {
  kernels::load_packed_own_shifts(p.common);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.count; i += gridDim.x * blockDim.x) {
    const PackedRowQuery q = p.queries[i];
    p.rows[i] = kernels::packed_row_of(p.common, q.source, q.place, q.known_l);
  }
}

// Device copies of the input arrays, freed on every path.
struct DeviceArrays {
  std::vector<void*> owned;
  ~DeviceArrays() {
    for (void* a : owned) cudaFree(a);
  }
  template <typename T>
  cudaError_t copy(const std::vector<T>& host, T** device) {
    const size_t bytes = (host.empty() ? 1 : host.size()) * sizeof(T);
    void* memory = nullptr;
    cudaError_t e = cudaMalloc(&memory, bytes);
    if (e != cudaSuccess) return e;
    owned.push_back(memory);
    *device = static_cast<T*>(memory);
    return host.empty() ? cudaSuccess
                        : cudaMemcpy(memory, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
};

}  // namespace

PackedRowsResult run_packed_rows(const PackedRowsInput& in) {
  PackedRowsResult result;
  kernels::HtGeometry geo{};
  geo.nranks = in.ranks;
  geo.rank = in.rank;
  geo.local_experts = in.local_experts;
  result.shifts_in_shared = kernels::packed_own_shifts_fit(geo);

  DeviceArrays arrays;
  PackedRowsParams p;
  std::memset(&p, 0, sizeof p);
  p.common.geo = geo;
  p.count = static_cast<int>(in.queries.size());
  std::vector<int32_t> rows(in.queries.size(), -1);
  PackedRowQuery* queries = nullptr;
  cudaError_t e = arrays.copy(in.source_starts, &p.common.handle.source_starts);
  if (e == cudaSuccess) e = arrays.copy(in.expert_base, &p.common.handle.expert_base);
  if (e == cudaSuccess) e = arrays.copy(in.queries, &queries);
  if (e == cudaSuccess) e = arrays.copy(rows, &p.rows);
  if (e == cudaSuccess) {
    p.queries = queries;
    packed_rows_kernel<<<in.blocks, kThreads>>>(p);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaMemcpy(rows.data(), p.rows, rows.size() * sizeof(int32_t), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    result.cuda_error = cudaGetErrorString(e);
    return result;
  }
  result.rows = std::move(rows);
  return result;
}

}  // namespace epc::gputest::parts
