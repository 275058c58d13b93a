// SPDX-License-Identifier: Apache-2.0
#include "core/device_memory.hpp"

#include <cstring>

#include "core/gpu_check.hpp"

namespace epc {

DeviceAllocations::~DeviceAllocations() {
  if (arrays_.empty()) return;
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  for (void* array : arrays_) cudaFree(array);
  if (previous >= 0) cudaSetDevice(previous);
}

void* DeviceAllocations::allocate_bytes(size_t bytes, const char* what) {
  arrays_.reserve(arrays_.size() + 1);  // so that keeping the pointer cannot fail after cudaMalloc
  void* array = nullptr;
  check_cuda(cudaMalloc(&array, bytes), what);
  arrays_.push_back(array);
  return array;
}

void* allocate_pinned_bytes(size_t bytes, unsigned int flags, const char* what) {
  void* memory = nullptr;
  check_cuda(cudaHostAlloc(&memory, bytes, flags), what);
  std::memset(memory, 0, bytes);
  return memory;
}

}  // namespace epc
