// Filling device buffers with a 16-bit pattern (bf16 constants), which cudaMemset cannot do.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace epc::bench {

cudaError_t fill_u16(void* data, uint16_t value, size_t count, cudaStream_t stream);

constexpr uint16_t kBf16One = 0x3F80;

}  // namespace epc::bench
