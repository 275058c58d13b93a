// SPDX-License-Identifier: Apache-2.0
// GIN set-up and tear-down of a group whose ranks span LSA teams (core/group.cpp calls
// them; kernels/launch.hpp says what each does). Every other GIN call is in the transport
// (gin_transport.cuh), which the data and barrier kernels reach through PeerTransport.
#include "kernels/common/kernel_stack.hpp"
#include "kernels/launch.hpp"

namespace epc::kernels {

namespace {

// Context 0 is the only one the transport uses (Group::transport), so its signals are the
// only ones to clear.
__global__ void gin_reset_signals_kernel(const GinState* state, uint32_t count) {
  ncclGin gin(state->comm, 0);
  for (uint32_t id = blockIdx.x * blockDim.x + threadIdx.x; id < count; id += gridDim.x * blockDim.x) {
    gin.resetSignal(id);
  }
}

__global__ void gin_flush_kernel(const GinState* state) {
  ncclGin gin(state->comm, 0);
  gin.flush(ncclCoopThread{});
}

}  // namespace

cudaError_t launch_gin_reset_signals(const GinState* state, uint32_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const uint32_t threads = 256;
  const uint32_t blocks = (count + threads - 1) / threads < 64 ? (count + threads - 1) / threads : 64;
  gin_reset_signals_kernel<<<blocks, threads, 0, stream>>>(state, count);
  return cudaGetLastError();
}

cudaError_t launch_gin_flush(const GinState* state, cudaStream_t stream) {
  gin_flush_kernel<<<1, 1, 0, stream>>>(state);
  return cudaGetLastError();
}

size_t gin_lifecycle_local_bytes() { return max_local_bytes(gin_reset_signals_kernel, gin_flush_kernel); }

}  // namespace epc::kernels
