// SPDX-License-Identifier: Apache-2.0
// Stamping a phase boundary of a low-latency step into the phase trace
// (kernels/wire/ll_phase_trace.hpp). Exists only in builds configured with
// -Dphase_trace=true: every use in the kernels sits inside #ifdef EPC_PHASE_TRACE, so
// without the option they compile to what they were without the trace.
#pragma once

#ifdef EPC_PHASE_TRACE

#include <cstdint>

#include "kernels/wire/ll_phase_trace.hpp"

namespace epc::kernels {

// Records `phase` of `step` in `ring` (an operation's [kLlPhaseTraceSteps] records). One
// thread per stamp: the caller picks it. A call, never inlined (`inline` is for the one
// definition rule only): inlined, its address arithmetic changed the register allocation of
// whole kernels (the fused dispatch spilled), which moves the times being traced more than a
// call made by one thread does.
inline __device__ __noinline__ void stamp_phase(LlPhaseRecord* ring, uint64_t step, int phase) {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  LlPhaseStamp& stamp = ring[step % kLlPhaseTraceSteps].stamp[phase];
  stamp.ns = now;
  stamp.step_plus_one = step + 1;
}

}  // namespace epc::kernels

#endif  // EPC_PHASE_TRACE
