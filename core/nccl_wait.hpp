// SPDX-License-Identifier: Apache-2.0
// Bounded waits for NCCL's calls that need every rank (a collective, a window's
// registration, a device communicator's creation). On a blocking communicator such a call
// returns once every rank has made it; on a non-blocking one (ncclConfig_t.blocking = 0) it
// returns ncclInProgress and NCCL finishes it in the background, and a collective's kernel
// ends only when the peers' kernels have run. A rank that never makes the call leaves the
// others waiting for good, so every wait here ends at a deadline. The call is then still in
// flight: only ncclCommAbort ends it, and until then NCCL (or its kernel) may still write
// what the call was given, so nothing it was given can be freed, and the device cannot be
// synchronized. Its owner marks such a communicator stranded: epc_comm_destroy aborts it.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "core/deadline.hpp"
#include "core/error.hpp"

namespace epc {

// EPC_ERR_TIMEOUT from a wait whose NCCL call is still in flight (see above): its catcher
// must leave what the call was given allocated, and the device unsynchronized.
class StrandedCall : public Error {
 public:
  explicit StrandedCall(const std::string& message) : Error(EPC_ERR_TIMEOUT, message) {}
};

// Reads `comm`'s state (ncclCommGetAsyncError) into *state until it is not ncclInProgress
// (true) or `deadline` has passed (false).
bool await_nccl_state(ncclComm_t comm, const Deadline& deadline, ncclResult_t* state);
// The result of an NCCL call on `comm` that returned `issued`, once NCCL has finished it:
// unless `issued` is an error, waits until the communicator's state (ncclCommGetAsyncError)
// is not ncclInProgress. Throws StrandedCall when `deadline` passed first.
ncclResult_t settle_nccl(ncclComm_t comm, ncclResult_t issued, const char* what, const Deadline& deadline);

// settle_nccl, then EPC_ERR_NCCL with NCCL's words when the call failed.
void finish_nccl(ncclComm_t comm, ncclResult_t issued, const char* what, const Deadline& deadline);

// Waits until everything queued on `stream` (an NCCL collective among it) has run. Throws
// EPC_ERR_CUDA when it failed, StrandedCall when `deadline` passed first.
void finish_stream(cudaStream_t stream, const char* what, const Deadline& deadline);

// Remembers that a StrandedCall left `comm` with a call in flight.
void mark_stranded(ncclComm_t comm) noexcept;
// Whether mark_stranded was called for `comm`; forgets it (the caller is about to abort it).
bool take_stranded(ncclComm_t comm);

}  // namespace epc
