// SPDX-License-Identifier: Apache-2.0
// Filling device buffers with a 16- or 32-bit pattern (bf16 and fp32 constants), which
// cudaMemset cannot do.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace epc::bench {

cudaError_t fill_u16(void* data, uint16_t value, size_t count, cudaStream_t stream);
cudaError_t fill_u32(void* data, uint32_t value, size_t count, cudaStream_t stream);

constexpr uint16_t kBf16One = 0x3F80;
constexpr uint32_t kFp32One = 0x3F800000u;
constexpr uint8_t kFp8E4m3One = 0x38;

}  // namespace epc::bench
