// SPDX-License-Identifier: Apache-2.0
// The per-expert counts a dispatch reports beside its layout's outputs, in either mode: a
// copy into pinned host memory and a running sum on the device (EpcDispatchArgs).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "epcomm/epcomm.h"

namespace epc {

// Per-expert counts a dispatch can report beside its layout's outputs: the memory, not the
// caller's descriptors, which are borrowed for the call only (a send-only step's host copy
// is queued later, by epc_complete).
struct CountOutputs {
  int32_t* host = nullptr;         // [L] int32, pinned host memory
  int64_t* accumulated = nullptr;  // [L] int64, device
};
// Checks both (shapes, dtypes, and that `host` is pinned host memory).
CountOutputs check_count_outputs(const EpcDispatchArgs& args, int64_t local_experts);
// Queues the copy of `counts` ([L] int32 on the device) into `outputs.host`, if given.
void copy_counts_to_host(const CountOutputs& outputs, const int32_t* counts, int64_t local_experts,
                         cudaStream_t stream);

}  // namespace epc
