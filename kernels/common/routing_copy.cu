// SPDX-License-Identifier: Apache-2.0
// Routing enters a handle through this copy: int64 or int32 ids become int32, and an id
// outside [-1, num_experts) is replaced by -1 (masked) and reported in the group's error
// record, so a bad value can never become an address in the communication kernels. It can
// also count the entries per expert (LL handles send these counts at every dispatch).
#include "kernels/common/kernel_stack.hpp"
#include "kernels/device/report.cuh"
#include "kernels/launch.hpp"

namespace epc::kernels {

namespace {

__global__ void routing_copy_kernel(RoutingCopyParams p) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.count; i += gridDim.x * blockDim.x) {
    const long long id =
        p.index_bytes == 8 ? static_cast<const int64_t*>(p.topk_idx)[i] : static_cast<const int32_t*>(p.topk_idx)[i];
    const bool valid = id >= -1 && id < p.num_experts;
    if (!valid) report_failure(p.error, EPC_ERR_INVALID_ARGUMENT, kPhaseRouting, p.rank, -1, 0);
    p.out[i] = valid ? static_cast<int32_t>(id) : -1;
    if (p.expert_entries != nullptr && valid && id >= 0) atomicAdd(&p.expert_entries[id], 1);
  }
}

}  // namespace

cudaError_t launch_routing_copy(const RoutingCopyParams& params, cudaStream_t stream) {
  if (params.count == 0) return cudaSuccess;
  const int threads = 256;
  const int blocks = (params.count + threads - 1) / threads < 64 ? (params.count + threads - 1) / threads : 64;
  routing_copy_kernel<<<blocks, threads, 0, stream>>>(params);
  return cudaGetLastError();
}

size_t routing_copy_local_bytes() { return max_local_bytes(routing_copy_kernel); }

}  // namespace epc::kernels
