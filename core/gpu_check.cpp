// SPDX-License-Identifier: Apache-2.0
#include "core/gpu_check.hpp"

#include "core/error.hpp"

namespace epc {

void check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky-free error so later calls are not blamed for it
  EpcStatus status = EPC_ERR_CUDA;
  if (err == cudaErrorMemoryAllocation) status = EPC_ERR_OUT_OF_MEMORY;
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) status = EPC_ERR_NO_DEVICE;
  fail(status, format("%s failed: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err)));
}

std::string nccl_failure(ncclResult_t res, const char* what, ncclComm_t comm) {
  const char* detail = ncclGetLastError(comm);
  return format("%s failed: %s%s%s", what, ncclGetErrorString(res), detail != nullptr && detail[0] != '\0' ? ": " : "",
                detail != nullptr ? detail : "");
}

void check_nccl(ncclResult_t res, const char* what, ncclComm_t comm) {
  if (res == ncclSuccess) return;
  fail(EPC_ERR_NCCL, nccl_failure(res, what, comm));
}

}  // namespace epc
