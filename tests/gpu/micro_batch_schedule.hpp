// SPDX-License-Identifier: Apache-2.0
// Two-micro-batch schedules of low-latency send-only steps (test_ll_micro_batches.cpp): the
// calls of one layer of each micro-batch (dispatch send, complete, combine send, complete),
// every interleaving of two such layers, and a runner that makes the calls on one stream or on
// one stream per micro-batch, ordered by events as the header asks (each direction's sends in
// the order they are made).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "epcomm/epcomm.h"
#include "tests/gpu/ll_case.hpp"

namespace epc::gputest::ll {

enum class MbOp { kDispatchSend, kCombineSend, kComplete };

struct MbCall {
  int batch;  // 0: A, 1: B, ...
  MbOp op;
};

// One micro-batch's calls in one layer: dispatch send, complete, combine send, complete.
std::vector<MbCall> layer_calls(int batch);

// Every interleaving of the layers of batches 0 and 1 that keeps each batch's own order:
// C(8, 4) = 70 schedules, out-of-order completes among them.
std::vector<std::vector<MbCall>> two_batch_interleavings();

// "A.dispatch A.complete B.dispatch ..." for messages.
std::string describe(const std::vector<MbCall>& calls);

class MicroBatchRunner {
 public:
  // streams[b] runs batch b's calls; the same stream for every batch is allowed.
  explicit MicroBatchRunner(std::vector<cudaStream_t> streams);
  ~MicroBatchRunner();
  MicroBatchRunner(const MicroBatchRunner&) = delete;
  MicroBatchRunner& operator=(const MicroBatchRunner&) = delete;

  cudaStream_t stream(int batch) const { return streams_[static_cast<size_t>(batch)]; }
  // Makes `call` on batch's handle and buffers. A send waits (an event) for the previous
  // send of its direction when that ran on another stream.
  ::testing::AssertionResult call(EpcHandle* handle, const LlBuffers& buffers, const MbCall& call);

 private:
  std::vector<cudaStream_t> streams_;
  cudaEvent_t sent_[2] = {nullptr, nullptr};  // the last send of each direction
  cudaStream_t sent_on_[2] = {nullptr, nullptr};
  bool any_sent_[2] = {false, false};
};

}  // namespace epc::gputest::ll
