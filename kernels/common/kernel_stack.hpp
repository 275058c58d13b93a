// SPDX-License-Identifier: Apache-2.0
// The per-thread local memory (stack frames and spills) a set of kernels needs, read from
// their compiled attributes (which also loads them, under CUDA's lazy module loading).
// Group creation reserves the largest before any kernel of the group runs (core/group.cpp,
// reserve_kernel_stack says why).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

namespace epc::kernels {

template <typename... Kernels>
size_t max_local_bytes(Kernels... kernels) {
  size_t most = 0;
  for (const void* kernel : {reinterpret_cast<const void*>(kernels)...}) {
    cudaFuncAttributes attributes{};
    if (cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess) most = std::max(most, attributes.localSizeBytes);
  }
  return most;
}

}  // namespace epc::kernels
