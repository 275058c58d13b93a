// SPDX-License-Identifier: Apache-2.0
#include "tests/gpu/micro_batch_schedule.hpp"

namespace epc::gputest::ll {

std::vector<MbCall> layer_calls(int batch) {
  return {
      {batch, MbOp::kDispatchSend}, {batch, MbOp::kComplete}, {batch, MbOp::kCombineSend}, {batch, MbOp::kComplete}};
}

namespace {

void interleave(const std::vector<MbCall>& a, size_t i, const std::vector<MbCall>& b, size_t j,
                std::vector<MbCall>& prefix, std::vector<std::vector<MbCall>>& out) {
  if (i == a.size() && j == b.size()) {
    out.push_back(prefix);
    return;
  }
  if (i < a.size()) {
    prefix.push_back(a[i]);
    interleave(a, i + 1, b, j, prefix, out);
    prefix.pop_back();
  }
  if (j < b.size()) {
    prefix.push_back(b[j]);
    interleave(a, i, b, j + 1, prefix, out);
    prefix.pop_back();
  }
}

}  // namespace

std::vector<std::vector<MbCall>> two_batch_interleavings() {
  std::vector<std::vector<MbCall>> out;
  std::vector<MbCall> prefix;
  interleave(layer_calls(0), 0, layer_calls(1), 0, prefix, out);
  return out;
}

std::string describe(const std::vector<MbCall>& calls) {
  std::string out;
  for (const MbCall& c : calls) {
    if (!out.empty()) out += ' ';
    out += static_cast<char>('A' + c.batch);
    out += c.op == MbOp::kDispatchSend ? ".dispatch" : c.op == MbOp::kCombineSend ? ".combine" : ".complete";
  }
  return out;
}

MicroBatchRunner::MicroBatchRunner(std::vector<cudaStream_t> streams) : streams_(std::move(streams)) {
  for (cudaEvent_t& e : sent_) (void)cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
}

MicroBatchRunner::~MicroBatchRunner() {
  for (cudaEvent_t e : sent_) {
    if (e != nullptr) (void)cudaEventDestroy(e);
  }
}

::testing::AssertionResult MicroBatchRunner::call(EpcHandle* handle, const LlBuffers& buffers, const MbCall& c) {
  const cudaStream_t s = stream(c.batch);
  const std::string what = describe({c});
  if (c.op == MbOp::kComplete) return epc_ok(epc_complete(handle, 0, s), what);
  const int direction = c.op == MbOp::kDispatchSend ? 0 : 1;
  if (any_sent_[direction] && sent_on_[direction] != s) {
    ::testing::AssertionResult waited = cuda_ok(cudaStreamWaitEvent(s, sent_[direction], 0), what + ": event wait");
    if (!waited) return waited;
  }
  const EpcStatus status = direction == 0 ? call_dispatch(handle, buffers, EPC_STEP_SEND_ONLY, s)
                                          : call_combine(handle, buffers, EPC_STEP_SEND_ONLY, s);
  ::testing::AssertionResult sent = epc_ok(status, what);
  if (!sent) return sent;
  any_sent_[direction] = true;
  sent_on_[direction] = s;
  return cuda_ok(cudaEventRecord(sent_[direction], s), what + ": event record");
}

}  // namespace epc::gputest::ll
