// SPDX-License-Identifier: Apache-2.0
// The low-latency phase trace: where the LL kernels of a build configured with
// -Dphase_trace=true (EPC_PHASE_TRACE) stamp the phase boundaries of every dispatch and
// combine, and what the benchmark reads back (bench/phase_trace.hpp). The layout is always
// defined, so host code that reads it is built and tested everywhere; only the kernels'
// stamps and the buffer behind them depend on the option.
//
// One record per step of each operation, in a ring indexed by the step counter (the LL
// state's dispatch_step or combine_step): a stamp is the step it belongs to (plus one, so that
// a zeroed record holds none) and the GPU's global nanosecond timer (%globaltimer). The
// global timer, not clock64: the stamps of one step come from different blocks and, when
// the two parts run as two launches, from different kernels, so from SMs whose cycle
// counters do not agree.
#pragma once

#include <cstdint>

namespace epc::kernels {

// The boundaries of one operation (dispatch or combine), in the order they happen:
enum LlPhase : int {
  kLlPhaseStart = 0,        // block 0 enters the sending part
  kLlPhasePayloadSent = 1,  // block 0 has stored (and committed) its share of the payload
  kLlPhaseSignalsSent = 2,  // the last sending block has signalled every rank
  kLlPhaseWaitDone = 3,     // block 0 of the receiving part has every rank's signal
  kLlPhaseReceiveDone = 4,  // the last receiving block has finished, the step is complete
  kLlPhases = 5,
};

// Steps the ring holds: a reader sees at most the last this many of each operation.
constexpr int kLlPhaseTraceSteps = 1024;

struct LlPhaseStamp {
  uint64_t step_plus_one;  // 0: never written
  uint64_t ns;             // %globaltimer
};

struct LlPhaseRecord {
  LlPhaseStamp stamp[kLlPhases];
};

struct LlPhaseTrace {
  LlPhaseRecord dispatch[kLlPhaseTraceSteps];  // at dispatch_step % kLlPhaseTraceSteps
  LlPhaseRecord combine[kLlPhaseTraceSteps];   // at combine_step % kLlPhaseTraceSteps
};

}  // namespace epc::kernels
