// SPDX-License-Identifier: Apache-2.0
#include "core/bootstrap.hpp"

#include <nccl.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/deadline.hpp"
#include "core/device_guard.hpp"
#include "core/error.hpp"
#include "core/gpu_check.hpp"
#include "core/nccl_runtime.hpp"
#include "core/nccl_wait.hpp"

namespace epc {

static_assert(sizeof(EpcUniqueId) == sizeof(ncclUniqueId), "EpcUniqueId must hold an ncclUniqueId");

namespace {

// The bound each communicator made with a timeout was given, which destroy_comm's finalize
// keeps to. Blocking communicators are not here: their finalize returns when it is done.
std::mutex bounds_mutex;
std::map<ncclComm_t, uint32_t>& bounds() {
  static std::map<ncclComm_t, uint32_t> by_comm;
  return by_comm;
}

// Forgets `comm`'s bound and returns it (0: none).
uint32_t take_bound(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(bounds_mutex);
  const auto it = bounds().find(comm);
  if (it == bounds().end()) return 0;
  const uint32_t ms = it->second;
  bounds().erase(it);
  return ms;
}

// A non-blocking communicator's creation, waited for until `deadline`. What NCCL made of a
// communicator that failed, or is not complete by then, is aborted: the caller gets nothing
// to destroy.
ncclComm_t init_bounded(const ncclUniqueId& id, int nranks, int rank, uint32_t timeout_ms) {
  const Deadline deadline(timeout_ms);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t issued = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  if (issued != ncclSuccess && issued != ncclInProgress) {
    const std::string reason = nccl_failure(issued, "ncclCommInitRankConfig", comm);
    if (comm != nullptr) ncclCommAbort(comm);
    fail(EPC_ERR_NCCL, reason);
  }
  ncclResult_t state = ncclInProgress;
  if (!await_nccl_state(comm, deadline, &state)) {
    ncclCommAbort(comm);
    fail(EPC_ERR_TIMEOUT,
         format("rank %d of %d: the communicator was not complete within %u ms (EpcCommConfig.timeout_ms): a "
                "rank has not called epc_comm_init_config with this id, or cannot be reached; what NCCL made "
                "of it was aborted",
                rank, nranks, timeout_ms));
  }
  if (state != ncclSuccess) {
    // NCCL's words before the abort, which takes them with the communicator.
    const std::string reason = nccl_failure(state, "ncclCommInitRankConfig (non-blocking)", comm);
    ncclCommAbort(comm);
    fail(EPC_ERR_NCCL, reason);
  }
  try {
    std::lock_guard<std::mutex> lock(bounds_mutex);
    bounds()[comm] = timeout_ms;
  } catch (...) {
    ncclCommAbort(comm);  // nothing is returned, so nothing may be left
    throw;
  }
  return comm;
}

// A non-blocking communicator's finalize, waited for up to `timeout_ms`; false when it did
// not finish (a rank stopped inside a collective, which the finalize waits for).
bool finalize_bounded(ncclComm_t comm, uint32_t timeout_ms) {
  const ncclResult_t issued = ncclCommFinalize(comm);
  if (issued != ncclSuccess && issued != ncclInProgress) return false;
  ncclResult_t state = ncclInProgress;
  return await_nccl_state(comm, Deadline(timeout_ms), &state) && state == ncclSuccess;
}

}  // namespace

EpcUniqueId create_unique_id() {
  check_nccl_runtime();
  ncclUniqueId nccl_id;
  check_nccl(ncclGetUniqueId(&nccl_id), "ncclGetUniqueId");
  EpcUniqueId id;
  std::memcpy(id.bytes, nccl_id.internal, sizeof id.bytes);
  return id;
}

void* init_comm(const EpcUniqueId& id, int nranks, int rank, int cuda_device, uint32_t timeout_ms) {
  if (nranks < 1) fail_argument(format("nranks is %d; it must be at least 1", nranks));
  if (rank < 0 || rank >= nranks) {
    fail_argument(format("rank is %d; it must be in [0, nranks=%d)", rank, nranks));
  }
  check_nccl_runtime();
  int device_count = 0;
  check_cuda(cudaGetDeviceCount(&device_count), "cudaGetDeviceCount");
  if (cuda_device >= device_count) {
    fail_argument(format("cuda_device is %d but only %d CUDA devices are visible", cuda_device, device_count));
  }
  // cuda_device stays current only when the call succeeds: a failing call changes nothing.
  DeviceGuard current(cuda_device);
  ncclUniqueId nccl_id;
  std::memcpy(nccl_id.internal, id.bytes, sizeof id.bytes);
  ncclComm_t comm = nullptr;
  if (timeout_ms != 0) {
    comm = init_bounded(nccl_id, nranks, rank, timeout_ms);
  } else {
    check_nccl(ncclCommInitRank(&comm, nranks, nccl_id, rank), "ncclCommInitRank");
  }
  current.keep();
  return comm;
}

void destroy_comm(void* comm) {
  auto c = static_cast<ncclComm_t>(comm);
  const uint32_t bound = take_bound(c);
  // A communicator with a call no rank will finish (a timed-out epc_group_create left it so),
  // or that NCCL reports failed, cannot be finalized: finalizing waits for its work.
  ncclResult_t state = ncclSuccess;
  const bool stranded = take_stranded(c);
  if (stranded || ncclCommGetAsyncError(c, &state) != ncclSuccess || state != ncclSuccess) {
    check_nccl(ncclCommAbort(c), "ncclCommAbort");
    return;
  }
  if (bound != 0) {
    if (!finalize_bounded(c, bound)) {
      check_nccl(ncclCommAbort(c), "ncclCommAbort");
      return;
    }
    check_nccl(ncclCommDestroy(c), "ncclCommDestroy");
    return;
  }
  ncclResult_t finalize = ncclCommFinalize(c);
  ncclResult_t destroy = ncclCommDestroy(c);
  check_nccl(finalize, "ncclCommFinalize");
  check_nccl(destroy, "ncclCommDestroy");
}

}  // namespace epc
