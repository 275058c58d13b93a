// SPDX-License-Identifier: Apache-2.0
// --micro-batches=2 (LL): one decode layer of two micro-batches, A and B, each a dispatch, a
// stand-in expert GEMM (bench/gemm_stand_in.hpp, --gemm-us on --gemm-sms SMs) and a combine,
// timed per layer in two schedules measured in the same run:
//   serial:  A's dispatch, GEMM, combine, then B's, all on one stream (whole calls);
//   overlap: as vLLM's dual-batch overlap: both dispatches sent (EPC_STEP_SEND_ONLY), A's
//            completed, A's GEMM on a compute stream while B's dispatch completes, B's GEMM
//            while A's combine is sent, then B's combine sent and both completed.
// Events order each stream after what it needs; the layer's time is the CUDA-event span on
// the communication stream from before the first call to after the last.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "bench/mode.hpp"
#include "bench/options.hpp"

namespace epc::bench {

struct MicroBatchCalls {
  // Queue micro-batch `batch`'s dispatch or combine with `flags` (0 or EPC_STEP_SEND_ONLY),
  // or its epc_complete, on `stream`.
  std::function<bool(int batch, uint32_t flags, cudaStream_t stream, std::string& error)> dispatch;
  std::function<bool(int batch, uint32_t flags, cudaStream_t stream, std::string& error)> combine;
  std::function<bool(int batch, cudaStream_t stream, std::string& error)> complete;
};

// Collective (every rank runs the same layers). Appends ours.mb.gemm (the stand-in alone, per
// micro-batch), ours.mb.serial and ours.mb.overlap (per layer of both micro-batches), each
// over `iters` layers after `warmup`.
bool time_micro_batches(cudaStream_t stream, const Options& options, int warmup, int iters,
                        const MicroBatchCalls& calls, MetricList& out, std::string& error);

}  // namespace epc::bench
