// SPDX-License-Identifier: Apache-2.0
#include "core/bootstrap.hpp"

#include <nccl.h>

#include <cstring>

#include "core/error.hpp"
#include "core/gpu_check.hpp"
#include "core/nccl_runtime.hpp"
#include "core/nccl_wait.hpp"

namespace epc {

static_assert(sizeof(EpcUniqueId) == sizeof(ncclUniqueId), "EpcUniqueId must hold an ncclUniqueId");

EpcUniqueId create_unique_id() {
  check_nccl_runtime();
  ncclUniqueId nccl_id;
  check_nccl(ncclGetUniqueId(&nccl_id), "ncclGetUniqueId");
  EpcUniqueId id;
  std::memcpy(id.bytes, nccl_id.internal, sizeof id.bytes);
  return id;
}

void* init_comm(const EpcUniqueId& id, int nranks, int rank, int cuda_device) {
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
  int previous = -1;
  if (cuda_device >= 0) {
    check_cuda(cudaGetDevice(&previous), "cudaGetDevice");
    check_cuda(cudaSetDevice(cuda_device), "cudaSetDevice");
  }
  ncclUniqueId nccl_id;
  std::memcpy(nccl_id.internal, id.bytes, sizeof id.bytes);
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRank(&comm, nranks, nccl_id, rank);
  // cuda_device stays current only when the call succeeds: a failing call changes nothing.
  if (result != ncclSuccess && previous >= 0) cudaSetDevice(previous);
  check_nccl(result, "ncclCommInitRank");
  return comm;
}

void destroy_comm(void* comm) {
  auto c = static_cast<ncclComm_t>(comm);
  // A communicator with a call no rank will finish (a timed-out epc_group_create left it so),
  // or that NCCL reports failed, cannot be finalized: finalizing waits for its work.
  ncclResult_t state = ncclSuccess;
  const bool stranded = take_stranded(c);
  if (stranded || ncclCommGetAsyncError(c, &state) != ncclSuccess || state != ncclSuccess) {
    check_nccl(ncclCommAbort(c), "ncclCommAbort");
    return;
  }
  ncclResult_t finalize = ncclCommFinalize(c);
  ncclResult_t destroy = ncclCommDestroy(c);
  check_nccl(finalize, "ncclCommFinalize");
  check_nccl(destroy, "ncclCommDestroy");
}

}  // namespace epc
