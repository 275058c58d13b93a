// SPDX-License-Identifier: Apache-2.0
#include "bench/l2_sweep.hpp"

#include "bench/try_call.hpp"

namespace epc::bench {

L2Sweep::~L2Sweep() {
  if (buffer_ != nullptr) cudaFree(buffer_);
}

bool L2Sweep::open(std::string& error) {
  int device = 0, l2 = 0;
  TRY_CUDA(cudaGetDevice(&device), "cudaGetDevice for the L2 sweep");
  TRY_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "reading the L2 size");
  if (l2 <= 0) {
    error = "the device reports no L2 to sweep (cudaDevAttrL2CacheSize is " + std::to_string(l2) + ")";
    return false;
  }
  // Four times the L2: its replacement is not strictly LRU, so one pass of its size may leave
  // lines behind.
  const size_t bytes = 4 * static_cast<size_t>(l2);
  TRY_CUDA(cudaMalloc(&buffer_, bytes), "allocating the L2 sweep's buffer");
  bytes_ = bytes;
  return true;
}

bool L2Sweep::run(cudaStream_t stream, std::string& error) const {
  TRY_CUDA(cudaMemsetAsync(buffer_, 0, bytes_, stream), "sweeping the L2");
  return true;
}

StepCalls with_sweeps(const StepCalls& step, const L2Sweep& sweep, cudaStream_t stream) {
  StepCalls swept = step;
  swept.dispatch = [dispatch = step.dispatch, &sweep, stream](StepMarks* marks, int iter, std::string& error) {
    return sweep.run(stream, error) && dispatch(marks, iter, error);
  };
  return swept;
}

}  // namespace epc::bench
