// SPDX-License-Identifier: Apache-2.0
#include "core/nccl_wait.hpp"

#include <mutex>
#include <set>

#include "core/gpu_check.hpp"

namespace epc {
namespace {

std::mutex stranded_mutex;
std::set<ncclComm_t>& stranded() {
  static std::set<ncclComm_t> comms;
  return comms;
}

[[noreturn]] void give_up(const char* what, const Deadline& deadline) {
  throw StrandedCall(
      format("%s did not finish within %u ms (the group's timeout_ms): a rank has not taken part "
             "in it. NCCL still has it in flight, and only ncclCommAbort ends it: abort the "
             "communicator (epc_comm_destroy does, for one from epc_comm_init[_config]); what the call "
             "was given stays allocated (leaked)",
             what, deadline.ms()));
}

}  // namespace

bool await_nccl_state(ncclComm_t comm, const Deadline& deadline, ncclResult_t* state) {
  *state = ncclInProgress;
  return poll_until(deadline, [&] {
    if (ncclCommGetAsyncError(comm, state) != ncclSuccess) *state = ncclInternalError;
    return *state != ncclInProgress;
  });
}

ncclResult_t settle_nccl(ncclComm_t comm, ncclResult_t issued, const char* what, const Deadline& deadline) {
  // Not only ncclInProgress: on a non-blocking communicator NCCL 2.28's ncclDevCommCreate and
  // ncclCommWindowRegister return ncclSuccess with the work still running in the background
  // (it writes their outputs later), so the communicator's state is what says it is done.
  if (issued != ncclSuccess && issued != ncclInProgress) return issued;
  ncclResult_t state = ncclInProgress;
  if (!await_nccl_state(comm, deadline, &state)) give_up(what, deadline);
  return state;
}

void finish_nccl(ncclComm_t comm, ncclResult_t issued, const char* what, const Deadline& deadline) {
  check_nccl(settle_nccl(comm, issued, what, deadline), what, comm);
}

void finish_stream(cudaStream_t stream, const char* what, const Deadline& deadline) {
  cudaError_t state = cudaErrorNotReady;
  const bool done = poll_until(deadline, [&] {
    state = cudaStreamQuery(stream);
    return state != cudaErrorNotReady;
  });
  if (!done) give_up(what, deadline);
  check_cuda(state, what);
}

void mark_stranded(ncclComm_t comm) noexcept {
  try {
    std::lock_guard<std::mutex> lock(stranded_mutex);
    stranded().insert(comm);
  } catch (...) {
    // Not remembered: epc_comm_destroy then finalizes rather than aborts it. Out of memory
    // here leaves nothing better to do.
  }
}

bool take_stranded(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(stranded_mutex);
  return stranded().erase(comm) > 0;
}

}  // namespace epc
