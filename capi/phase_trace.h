/* SPDX-License-Identifier: Apache-2.0 */
/* A debugging hook, not part of epcomm's ABI: builds configured with -Dphase_trace=true
 * (EPC_PHASE_TRACE) export it, under its own version node (capi/epcomm_phase_trace.map);
 * other builds have no such symbol. Neither installed nor in capi/abi.json. The benchmark
 * reads the low-latency phase trace through it (bench/phase_trace.hpp, docs/measuring.md). */
#ifndef EPCOMM_PHASE_TRACE_H
#define EPCOMM_PHASE_TRACE_H

#include <stddef.h>

#include "epcomm/epcomm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copies the low-latency group's phase trace (the LlPhaseTrace layout of
 * kernels/wire/ll_phase_trace.hpp) into `out`, `out_bytes` long (its exact size), once the
 * group's device is idle. EPC_ERR_INVALID_ARGUMENT for a NULL or high-throughput group, a NULL
 * `out` or another size; EPC_ERR_CUDA when the copy fails. */
EPC_API EpcStatus epc_debug_ll_phase_trace(const EpcGroup* group, void* out, size_t out_bytes);

#ifdef __cplusplus
}
#endif

#endif /* EPCOMM_PHASE_TRACE_H */
