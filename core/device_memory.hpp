// SPDX-License-Identifier: Apache-2.0
// Device memory owned by type. A DeviceAllocations holds every array of one owner (a
// handle, a mode's step state, a group) and frees them together when it goes away, on
// error paths too: adding an array is one allocate() call and nothing else.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

namespace epc {

class DeviceAllocations {
 public:
  // Arrays on CUDA device `device`.
  explicit DeviceAllocations(int device) : device_(device) {}
  // Waits for the device first (kernels queued on these arrays may still use them), then
  // frees every array. The caller's current device is restored.
  ~DeviceAllocations();
  DeviceAllocations(const DeviceAllocations&) = delete;
  DeviceAllocations& operator=(const DeviceAllocations&) = delete;

  int device() const { return device_; }

  // `count` elements of T (one when count is 0, so every array has an address). Throws
  // epc::Error naming `what` when CUDA cannot allocate. The device must be current.
  template <typename T>
  T* allocate(size_t count, const char* what) {
    return static_cast<T*>(allocate_bytes((count == 0 ? 1 : count) * sizeof(T), what));
  }

 private:
  void* allocate_bytes(size_t bytes, const char* what);

  int device_;
  std::vector<void*> arrays_;
};

// Frees pinned host memory (cudaHostAlloc), for std::unique_ptr.
struct PinnedHostFree {
  void operator()(void* ptr) const noexcept { cudaFreeHost(ptr); }
};

// One T in page-locked host memory, owned.
template <typename T>
using PinnedHost = std::unique_ptr<T, PinnedHostFree>;

// `bytes` of page-locked host memory from cudaHostAlloc with `flags`, zeroed. Throws
// epc::Error naming `what` when CUDA cannot allocate.
void* allocate_pinned_bytes(size_t bytes, unsigned int flags, const char* what);

// One zeroed T in page-locked host memory (cudaHostAlloc with `flags`); the kernels that
// write it and the host that reads it agree on nothing but its bytes.
template <typename T>
PinnedHost<T> allocate_pinned(unsigned int flags, const char* what) {
  static_assert(std::is_trivially_copyable_v<T>, "zeroed bytes are the value");
  return PinnedHost<T>(static_cast<T*>(allocate_pinned_bytes(sizeof(T), flags, what)));
}

}  // namespace epc
