// SPDX-License-Identifier: Apache-2.0
// For EXPERT_PACKED handles: each of this rank's entries' place among its entries for the
// rank hosting its expert, in (expert, token, slot) order. A stable radix sort of (expert,
// entry index) pairs puts them in that order (a rank's experts are consecutive ids); an
// entry's place is then its place in the sorted keys minus where that rank's keys begin.
// Deterministic, and a few launches without host synchronisation (capturable), once per
// routing.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/launch.hpp"

namespace epc::kernels {

namespace {

constexpr int kOrderThreads = 256;

// Masked entries take key E, after every expert.
__global__ void __launch_bounds__(kOrderThreads) entry_keys_kernel(HtEntryOrder o) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < o.entries; i += gridDim.x * blockDim.x) {
    const int32_t expert = o.topk_idx[i];
    o.keys_in[i] = expert >= 0 ? static_cast<uint32_t>(expert) : static_cast<uint32_t>(o.num_experts);
    o.values_in[i] = i;
  }
}

__global__ void __launch_bounds__(kOrderThreads) entry_positions_kernel(HtEntryOrder o) {
  for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < o.entries; p += gridDim.x * blockDim.x) {
    const uint32_t expert = o.keys_out[p];
    // The first sorted place of the destination rank's first expert (a lower bound).
    const uint32_t key = expert / o.local_experts * o.local_experts;
    int lo = 0, hi = p;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (o.keys_out[mid] < key) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    o.positions[o.values_out[p]] = expert < static_cast<uint32_t>(o.num_experts) ? p - lo : -1;
  }
}

int key_bits(int num_experts) {
  int bits = 1;
  while ((1ll << bits) <= num_experts) ++bits;  // keys go up to E
  return bits;
}

int grid_for(int entries) { return entries <= 0 ? 1 : (entries + kOrderThreads - 1) / kOrderThreads; }

}  // namespace

size_t ht_entry_order_temp_bytes(int max_entries, int num_experts) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                  static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), max_entries, 0, key_bits(num_experts));
  return bytes;
}

cudaError_t launch_ht_entry_order(const HtEntryOrder& o, cudaStream_t stream) {
  if (o.entries == 0) return cudaSuccess;
  entry_keys_kernel<<<grid_for(o.entries), kOrderThreads, 0, stream>>>(o);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  size_t bytes = o.temp_bytes;
  status = cub::DeviceRadixSort::SortPairs(o.temp, bytes, o.keys_in, o.keys_out, o.values_in, o.values_out, o.entries,
                                           0, key_bits(o.num_experts), stream);
  if (status != cudaSuccess) return status;
  entry_positions_kernel<<<grid_for(o.entries), kOrderThreads, 0, stream>>>(o);
  return cudaGetLastError();
}

}  // namespace epc::kernels
