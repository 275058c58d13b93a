// SPDX-License-Identifier: Apache-2.0
// Queueing a step's calls whole or split by EPC_STEP_SEND_ONLY, for the tests that compare
// the split halves with the fused calls (test_ht_split.cpp, test_ht_packed.cpp). A split
// call is its send-only half, then epc_complete on the same handle: on the same stream after
// other work, on a second stream joined to the first by events (as an engine overlapping
// the receive with compute does), or both captured into a CUDA graph (forked to the second
// stream inside the capture) and replayed.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "epcomm/epcomm.h"
#include "tests/gpu/gpu_case_common.hpp"

namespace epc::gputest {

enum class SplitMode { kFused, kSameStream, kSecondStream, kGraph };
const char* split_name(SplitMode mode);
// Every mode, fused first.
std::vector<SplitMode> every_split_mode();

// One call of a step (epc_dispatch or epc_combine with the test's arguments) with `flags`
// added to its own, queued on `stream`; the status as it is.
using StepCall = std::function<EpcStatus(uint32_t flags, cudaStream_t stream)>;

// A second stream, two events and a scratch buffer ("other work"), owned for the runs.
class SplitRunner {
 public:
  SplitRunner();
  ~SplitRunner();
  SplitRunner(const SplitRunner&) = delete;
  SplitRunner& operator=(const SplitRunner&) = delete;
  ::testing::AssertionResult status() const;

  // Queues each call of `calls` in order, on `handle`, as `mode` says; everything ends
  // ordered before later work on `stream`. kGraph captures them all into one graph
  // (collective: every rank must run the same calls) and launches it once.
  ::testing::AssertionResult run(SplitMode mode, EpcHandle* handle, cudaStream_t stream,
                                 const std::vector<StepCall>& calls);
  // kGraph's capture alone (collective): every call split, its epc_complete on the second
  // stream, into `exec`, for replays.
  ::testing::AssertionResult capture(EpcHandle* handle, cudaStream_t stream, const std::vector<StepCall>& calls,
                                     GraphExecPtr& exec);

 private:
  // The calls of a non-graph mode (kGraph's capture queues them as kSecondStream).
  ::testing::AssertionResult queue(SplitMode mode, EpcHandle* handle, cudaStream_t stream,
                                   const std::vector<StepCall>& calls);

  Stream second_;
  cudaEvent_t sent_ = nullptr;
  cudaEvent_t completed_ = nullptr;
  DeviceMemory scratch_;
  bool scratch_ok_ = false;
  cudaError_t create_error_ = cudaSuccess;
};

}  // namespace epc::gputest
