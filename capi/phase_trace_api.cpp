// SPDX-License-Identifier: Apache-2.0
// The low-latency phase trace of a group, for builds configured with -Dphase_trace=true only
// (capi/phase_trace.h says why it is not part of the ABI).
#include "capi/phase_trace.h"

#include "capi/call_guard.hpp"
#include "capi/handles.hpp"

#ifndef EPC_PHASE_TRACE
#error "capi/phase_trace_api.cpp is built only with -Dphase_trace=true (EPC_PHASE_TRACE)"
#endif

extern "C" EpcStatus epc_debug_ll_phase_trace(const EpcGroup* group, void* out, size_t out_bytes) {
  return epc::capi::guarded([&] {
    if (out == nullptr) epc::fail_argument("epc_debug_ll_phase_trace: out is NULL");
    epc::capi::ll_steps_of(group).read_phase_trace(out, out_bytes);
  });
}
