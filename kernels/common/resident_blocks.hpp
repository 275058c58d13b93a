// SPDX-License-Identifier: Apache-2.0
// Whether a launch may be fused: kernels whose receiving part spins on flags that sending
// blocks of the same launch raise must have every block resident at once. Shared by the
// low-latency (ll_step_kernel.cuh) and high-throughput (ht_step_kernel.cuh) launches.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

namespace epc::kernels {

// Blocks of one kernel that fit on a device at once, asked of CUDA once per device (the
// dynamic shared memory of these kernels is a few bytes per rank and does not change it).
class ResidentBlocks {
 public:
  explicit ResidentBlocks(int threads) : threads_(threads) {
    for (std::atomic<int>& entry : cache_) entry.store(-1, std::memory_order_relaxed);
  }

  template <typename Kernel>
  int get(Kernel kernel, size_t dynamic_shared) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return 0;
    int known = cache_[device].load(std::memory_order_relaxed);
    if (known >= 0) return known;
    int sms = 0, per_sm = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads_, dynamic_shared) != cudaSuccess) {
      return 0;  // unknown: never fuse
    }
    cache_[device].store(sms * per_sm, std::memory_order_relaxed);
    return sms * per_sm;
  }

 private:
  static constexpr int kMaxDevices = 64;
  int threads_;
  std::atomic<int> cache_[kMaxDevices];  // -1: not asked yet
};

}  // namespace epc::kernels
