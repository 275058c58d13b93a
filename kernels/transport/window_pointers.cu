// SPDX-License-Identifier: Apache-2.0
// Where NCCL maps the windows of this rank's node, asked once at group creation. NCCL's
// pointer calls read its window record from device memory, so a kernel that reached a peer
// through them waited for that load (a memory round trip on each SM) before its first store
// or poll; with the addresses known, PeerTransport reaches in-node windows by arithmetic on
// its own parameters (kernels/wire/transport.hpp).
#include "kernels/common/kernel_stack.hpp"
#include "kernels/launch.hpp"

namespace epc::kernels {

namespace {

__global__ void window_pointers_kernel(ncclWindow_t window, int first, int count, uint64_t* out) {
  for (int i = threadIdx.x; i <= count; i += blockDim.x) {
    const void* at = i < count ? ncclGetPeerPointer(window, 0, first + i) : ncclGetLocalPointer(window, 0);
    out[i] = reinterpret_cast<uint64_t>(at);
  }
}

}  // namespace

cudaError_t launch_window_pointers(ncclWindow_t window, int first, int count, uint64_t* out, cudaStream_t stream) {
  window_pointers_kernel<<<1, 128, 0, stream>>>(window, first, count, out);
  return cudaGetLastError();
}

size_t window_pointers_local_bytes() { return max_local_bytes(window_pointers_kernel); }

}  // namespace epc::kernels
