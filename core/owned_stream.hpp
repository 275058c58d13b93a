// SPDX-License-Identifier: Apache-2.0
// A CUDA stream owned by type, for the core's own work on the device (not the caller's
// streams). Non-blocking: it neither waits for the legacy default stream nor makes it wait,
// so work stuck on it (a collective whose peer never came) stops nothing else.
#pragma once

#include <cuda_runtime.h>

#include "core/gpu_check.hpp"

namespace epc {

class OwnedStream {
 public:
  // On the current device. Throws epc::Error naming `what` when CUDA cannot create it.
  explicit OwnedStream(const char* what) {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), what);
  }
  // Returns at once; CUDA releases the stream when the work queued on it has run.
  ~OwnedStream() { cudaStreamDestroy(stream_); }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;

  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace epc
