// SPDX-License-Identifier: Apache-2.0
// Makes a group's CUDA device current for the duration of a call and restores the caller's
// afterwards, so a thread driving several GPUs does not have to juggle cudaSetDevice.
#pragma once

#include <cuda_runtime.h>

#include "core/gpu_check.hpp"

namespace epc {

// A negative device leaves the current one (and restores nothing); keep() leaves `device`
// current after the guard, for a call that makes it current on success (epc_comm_init).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (device < 0) return;
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  void keep() { previous_ = -1; }

 private:
  int previous_ = -1;
};

}  // namespace epc
