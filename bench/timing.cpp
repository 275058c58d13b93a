// SPDX-License-Identifier: Apache-2.0
#include "bench/timing.hpp"

namespace epc::bench {

EventMarks::EventMarks(int iters, int marks) : iters_(iters), marks_(marks) {
  events_.assign(static_cast<size_t>(iters) * marks, nullptr);
  for (cudaEvent_t& e : events_) {
    if (cudaEventCreate(&e) != cudaSuccess) {
      e = nullptr;
      ok_ = false;
    }
  }
}

EventMarks::~EventMarks() {
  for (cudaEvent_t e : events_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
}

void EventMarks::record(int iter, int mark, cudaStream_t stream) {
  cudaEvent_t e = events_[static_cast<size_t>(iter) * marks_ + mark];
  if (e == nullptr || cudaEventRecord(e, stream) != cudaSuccess) ok_ = false;
}

bool EventMarks::elapsed_us(int from, int to, std::vector<double>& out) const {
  out.clear();
  for (int i = 0; i < iters_; ++i) {
    float ms = 0;
    const cudaEvent_t a = events_[static_cast<size_t>(i) * marks_ + from];
    const cudaEvent_t b = events_[static_cast<size_t>(i) * marks_ + to];
    if (a == nullptr || b == nullptr || cudaEventElapsedTime(&ms, a, b) != cudaSuccess) return false;
    out.push_back(static_cast<double>(ms) * 1000.0);
  }
  return true;
}

}  // namespace epc::bench
