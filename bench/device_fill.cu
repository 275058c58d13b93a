// SPDX-License-Identifier: Apache-2.0
#include "bench/device_fill.hpp"

namespace epc::bench {
namespace {

template <typename Word>
__global__ void fill_kernel(Word* data, Word value, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = value;
  }
}

template <typename Word>
cudaError_t fill(void* data, Word value, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const size_t wanted = (count + 255) / 256;
  const unsigned blocks = static_cast<unsigned>(wanted < 4096 ? wanted : 4096);
  fill_kernel<Word><<<blocks, 256, 0, stream>>>(static_cast<Word*>(data), value, count);
  return cudaGetLastError();
}

}  // namespace

cudaError_t fill_u16(void* data, uint16_t value, size_t count, cudaStream_t stream) {
  return fill<uint16_t>(data, value, count, stream);
}

cudaError_t fill_u32(void* data, uint32_t value, size_t count, cudaStream_t stream) {
  return fill<uint32_t>(data, value, count, stream);
}

}  // namespace epc::bench
