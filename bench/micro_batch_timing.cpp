// SPDX-License-Identifier: Apache-2.0
#include "bench/micro_batch_timing.hpp"

#include <vector>

#include "bench/gemm_stand_in.hpp"
#include "bench/stats.hpp"
#include "bench/timing.hpp"
#include "bench/try_call.hpp"
#include "epcomm/epcomm.h"

namespace epc::bench {

namespace {

// Events owned together: `count` of them, timing disabled unless `timed`.
class Events {
 public:
  Events(size_t count, bool timed) : events_(count, nullptr) {
    for (cudaEvent_t& e : events_) {
      if (cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming) != cudaSuccess) ok_ = false;
    }
  }
  ~Events() {
    for (cudaEvent_t e : events_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  bool ok() const { return ok_; }
  cudaEvent_t operator[](size_t i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
  bool ok_ = true;
};

struct Streams {
  cudaStream_t compute = nullptr;
  ~Streams() {
    if (compute != nullptr) cudaStreamDestroy(compute);
  }
};

// The stand-in GEMM's grid and length.
struct Gemm {
  int blocks;
  int us;
};

// `stream` waits for what `event` marks on `from` (recorded now).
bool join(cudaStream_t from, cudaEvent_t event, cudaStream_t stream, std::string& error) {
  TRY_CUDA(cudaEventRecord(event, from), "recording an ordering event");
  TRY_CUDA(cudaStreamWaitEvent(stream, event, 0), "waiting for an ordering event");
  return true;
}

bool serial_layer(cudaStream_t st, const Gemm& g, const MicroBatchCalls& calls, std::string& error) {
  for (int b = 0; b < 2; ++b) {
    if (!calls.dispatch(b, 0, st, error)) return false;
    TRY_CUDA(launch_gemm_stand_in(g.blocks, g.us, st), "the stand-in GEMM");
    if (!calls.combine(b, 0, st, error)) return false;
  }
  return true;
}

// Events: 0, 1 dispatch received (A, B); 2, 3 GEMM done (A, B); 4 the layer's start.
bool overlap_layer(cudaStream_t st, cudaStream_t cs, const Gemm& g, const MicroBatchCalls& calls, const Events& order,
                   std::string& error) {
  if (!join(st, order[4], cs, error)) return false;  // the compute stream starts with the layer
  for (int b = 0; b < 2; ++b) {
    if (!calls.dispatch(b, EPC_STEP_SEND_ONLY, st, error)) return false;
  }
  for (int b = 0; b < 2; ++b) {
    if (!calls.complete(b, st, error)) return false;  // b's dispatch received
    if (!join(st, order[b], cs, error)) return false;
    TRY_CUDA(launch_gemm_stand_in(g.blocks, g.us, cs), "the stand-in GEMM");
    TRY_CUDA(cudaEventRecord(order[2 + b], cs), "recording the GEMM's end");
  }
  for (int b = 0; b < 2; ++b) {
    TRY_CUDA(cudaStreamWaitEvent(st, order[2 + b], 0), "waiting for the GEMM");
    if (!calls.combine(b, EPC_STEP_SEND_ONLY, st, error)) return false;
  }
  for (int b = 0; b < 2; ++b) {
    if (!calls.complete(b, st, error)) return false;
  }
  return true;
}

// `layer` queued warmup + iters times on `st`; the event spans of the last `iters`.
template <typename Layer>
bool time_layers(cudaStream_t st, int warmup, int iters, Layer layer, std::vector<double>& us, std::string& error) {
  for (int i = 0; i < warmup; ++i) {
    if (!layer(error)) return false;
  }
  Events marks(static_cast<size_t>(iters) + 1, /*timed=*/true);
  if (!marks.ok()) {
    error = "cudaEventCreate failed";
    return false;
  }
  TRY_CUDA(cudaEventRecord(marks[0], st), "recording a layer mark");
  for (int i = 0; i < iters; ++i) {
    if (!layer(error)) return false;
    TRY_CUDA(cudaEventRecord(marks[static_cast<size_t>(i) + 1], st), "recording a layer mark");
  }
  TRY_CUDA(cudaStreamSynchronize(st), "running the timed layers");
  us.clear();
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    TRY_CUDA(cudaEventElapsedTime(&ms, marks[static_cast<size_t>(i)], marks[static_cast<size_t>(i) + 1]),
             "reading a layer's events");
    us.push_back(static_cast<double>(ms) * 1000.0);
  }
  return true;
}

}  // namespace

bool time_micro_batches(cudaStream_t st, const Options& o, int warmup, int iters, const MicroBatchCalls& calls,
                        MetricList& out, std::string& error) {
  Streams streams;
  TRY_CUDA(cudaStreamCreateWithFlags(&streams.compute, cudaStreamNonBlocking), "creating the compute stream");
  Events order(5, /*timed=*/false);
  if (!order.ok()) {
    error = "cudaEventCreate failed";
    return false;
  }
  Gemm g{o.gemm_sms, o.gemm_us};
  if (g.blocks == 0) {
    int device = 0;
    TRY_CUDA(cudaGetDevice(&device), "cudaGetDevice");
    TRY_CUDA(cudaDeviceGetAttribute(&g.blocks, cudaDevAttrMultiProcessorCount, device), "counting the SMs");
  }
  std::vector<double> us;
  auto gemm = [&](std::string& e) {
    const cudaError_t c = launch_gemm_stand_in(g.blocks, g.us, st);
    if (c != cudaSuccess) e = cuda_error("the stand-in GEMM", c);
    return c == cudaSuccess;
  };
  if (!time_layers(st, warmup, iters, gemm, us, error)) return false;
  out.emplace_back("ours.mb.gemm", summarize(us));
  if (!time_layers(st, warmup, iters, [&](std::string& e) { return serial_layer(st, g, calls, e); }, us, error)) {
    return false;
  }
  out.emplace_back("ours.mb.serial", summarize(us));
  auto overlap = [&](std::string& e) { return overlap_layer(st, streams.compute, g, calls, order, e); };
  if (!time_layers(st, warmup, iters, overlap, us, error)) return false;
  out.emplace_back("ours.mb.overlap", summarize(us));
  return true;
}

}  // namespace epc::bench
