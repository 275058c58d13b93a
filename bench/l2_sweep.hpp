// SPDX-License-Identifier: Apache-2.0
// --cold-l2: a step that starts with a cold L2, as it does inside a model. Between a dispatch
// and the next one an MoE layer's expert GEMMs stream their weights through the L2, so the
// step finds its inputs, its routing and its kernels' code in HBM; back-to-back steps in a
// benchmark find them in the L2 the previous step left. Before every dispatch of ours in the
// kernel, CUPTI and graph timings, the bench overwrites a buffer of four times the L2 with a
// memset (not a kernel, so no kernel span includes it; CUDA events before the step's first
// mark wait for it, and the step's marks come after it).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "bench/mode_support.hpp"

namespace epc::bench {

class L2Sweep {
 public:
  L2Sweep() = default;
  ~L2Sweep();
  L2Sweep(const L2Sweep&) = delete;
  L2Sweep& operator=(const L2Sweep&) = delete;
  // Allocates four times the current device's L2 (cudaDevAttrL2CacheSize). False with `error`
  // when the attribute or the allocation fails.
  bool open(std::string& error);
  // Queues the memset that evicts the L2 on `stream`.
  bool run(cudaStream_t stream, std::string& error) const;
  size_t bytes() const { return bytes_; }

 private:
  void* buffer_ = nullptr;
  size_t bytes_ = 0;
};

// `step` with `sweep` queued on `stream` before each of its dispatches (before the dispatch
// records its first mark).
StepCalls with_sweeps(const StepCalls& step, const L2Sweep& sweep, cudaStream_t stream);

}  // namespace epc::bench
