// SPDX-License-Identifier: Apache-2.0
// Makes a group's CUDA device current for the duration of a call and restores the caller's
// afterwards, so a thread driving several GPUs does not have to juggle cudaSetDevice.
#pragma once

#include <cuda_runtime.h>

#include "core/gpu_check.hpp"

namespace epc {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace epc
