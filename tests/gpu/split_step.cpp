// SPDX-License-Identifier: Apache-2.0
#include "tests/gpu/split_step.hpp"

#include <string>

#include "tests/gpu/rank_context.hpp"

namespace epc::gputest {

const char* split_name(SplitMode mode) {
  switch (mode) {
    case SplitMode::kFused:
      return "fused";
    case SplitMode::kSameStream:
      return "send-only + complete on one stream";
    case SplitMode::kSecondStream:
      return "send-only + complete on a second stream";
    default:
      return "send-only + complete in a CUDA graph";
  }
}

std::vector<SplitMode> every_split_mode() {
  return {SplitMode::kFused, SplitMode::kSameStream, SplitMode::kSecondStream, SplitMode::kGraph};
}

SplitRunner::SplitRunner() {
  create_error_ = cudaEventCreateWithFlags(&sent_, cudaEventDisableTiming);
  if (create_error_ == cudaSuccess) create_error_ = cudaEventCreateWithFlags(&completed_, cudaEventDisableTiming);
  // Here, not at the first run: nothing may allocate while a stream captures.
  if (create_error_ == cudaSuccess) scratch_ok_ = static_cast<bool>(scratch_.allocate(1 << 20, "the runs' scratch"));
}

SplitRunner::~SplitRunner() {
  if (sent_ != nullptr) cudaEventDestroy(sent_);
  if (completed_ != nullptr) cudaEventDestroy(completed_);
}

::testing::AssertionResult SplitRunner::status() const {
  if (create_error_ != cudaSuccess) return cuda_ok(create_error_, "cudaEventCreateWithFlags");
  if (!scratch_ok_) return ::testing::AssertionFailure() << "cudaMalloc of the split runs' scratch failed";
  return second_.status();
}

::testing::AssertionResult SplitRunner::queue(SplitMode mode, EpcHandle* handle, cudaStream_t stream,
                                              const std::vector<StepCall>& calls) {
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string which = std::string(split_name(mode)) + ", call " + std::to_string(i);
    if (mode == SplitMode::kFused) {
      const ::testing::AssertionResult r = epc_ok(calls[i](0, stream), which);
      if (!r) return r;
      continue;
    }
    ::testing::AssertionResult r = epc_ok(calls[i](EPC_STEP_SEND_ONLY, stream), which + ": the send-only half");
    // Other work between the halves, on the stream that sent.
    if (r) r = cuda_ok(cudaMemsetAsync(scratch_.get(), static_cast<int>(i), scratch_.bytes(), stream), "other work");
    if (r && mode == SplitMode::kSameStream) r = epc_ok(epc_complete(handle, 0, stream), which + ": epc_complete");
    if (r && mode != SplitMode::kSameStream) {
      r = cuda_ok(cudaEventRecord(sent_, stream), "cudaEventRecord after the send-only half");
      if (r) r = cuda_ok(cudaStreamWaitEvent(second_.get(), sent_, 0), "cudaStreamWaitEvent on the second stream");
      if (r) r = epc_ok(epc_complete(handle, 0, second_.get()), which + ": epc_complete on the second stream");
      if (r) r = cuda_ok(cudaEventRecord(completed_, second_.get()), "cudaEventRecord after epc_complete");
      if (r) r = cuda_ok(cudaStreamWaitEvent(stream, completed_, 0), "cudaStreamWaitEvent joining the streams");
    }
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult SplitRunner::run(SplitMode mode, EpcHandle* handle, cudaStream_t stream,
                                            const std::vector<StepCall>& calls) {
  if (mode != SplitMode::kGraph) return queue(mode, handle, stream, calls);
  GraphExecPtr exec;
  const ::testing::AssertionResult captured = capture(handle, stream, calls, exec);
  if (!captured) return captured;
  return cuda_ok(cudaGraphLaunch(exec.get(), stream), "cudaGraphLaunch of the split calls");
}

::testing::AssertionResult SplitRunner::capture(EpcHandle* handle, cudaStream_t stream,
                                                const std::vector<StepCall>& calls, GraphExecPtr& exec) {
  return capture_on_every_rank(stream, [&] { return queue(SplitMode::kSecondStream, handle, stream, calls); }, exec);
}

}  // namespace epc::gputest
