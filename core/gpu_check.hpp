// SPDX-License-Identifier: Apache-2.0
// Turning CUDA and NCCL failures into epc::Error with the call that failed and the
// library's own explanation.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace epc {

// Throws EPC_ERR_CUDA (or EPC_ERR_OUT_OF_MEMORY / EPC_ERR_NO_DEVICE) unless `err` is success.
void check_cuda(cudaError_t err, const char* what);

// Throws EPC_ERR_NCCL unless `res` is ncclSuccess; adds ncclGetLastError(comm) when given.
void check_nccl(ncclResult_t res, const char* what, ncclComm_t comm = nullptr);

// check_nccl's message for a failed `res`, for a caller that must release `comm` (which
// takes NCCL's last error with it) before it throws.
std::string nccl_failure(ncclResult_t res, const char* what, ncclComm_t comm = nullptr);

}  // namespace epc
