// SPDX-License-Identifier: Apache-2.0
#include "bench/memory_copy.hpp"

#include <vector>

#include "bench/mode_support.hpp"
#include "bench/timing.hpp"
#include "bench/try_call.hpp"

namespace epc::bench {

bool measure_memory_copy(RankSession& session, int64_t bytes, int warmup, int iters, Summary& out, std::string& problem,
                         std::string& error) {
  problem.clear();
  if (bytes <= 0 || iters < 1) {
    problem = "the memory copy needs bytes and at least one copy";
    return true;
  }
  DeviceBuffer from, to;
  const size_t size = static_cast<size_t>(bytes);
  if (!from.allocate(size, "cudaMalloc of the copy's source", problem) ||
      !to.allocate(size, "cudaMalloc of the copy's destination", problem)) {
    cudaGetLastError();  // an allocation failure is not sticky; leave nothing behind
    return true;
  }
  const cudaStream_t st = session.stream();
  TRY_CUDA(cudaMemsetAsync(from.ptr, 1, size, st), "filling the copy's source");
  for (int i = 0; i < warmup; ++i) {
    TRY_CUDA(cudaMemcpyAsync(to.ptr, from.ptr, size, cudaMemcpyDeviceToDevice, st), "copying device memory");
  }
  EventMarks marks(iters, 2);
  for (int i = 0; i < iters; ++i) {
    marks.record(i, 0, st);
    TRY_CUDA(cudaMemcpyAsync(to.ptr, from.ptr, size, cudaMemcpyDeviceToDevice, st), "copying device memory");
    marks.record(i, 1, st);
  }
  TRY_CUDA(cudaStreamSynchronize(st), "timing the device-memory copy");
  std::vector<double> us;
  if (!marks.ok() || !marks.elapsed_us(0, 1, us)) {
    error = "reading the CUDA events of the device-memory copy";
    return false;
  }
  out = summarize(us);
  return true;
}

}  // namespace epc::bench
