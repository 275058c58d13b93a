// SPDX-License-Identifier: Apache-2.0
// Early returns for the benchmark's setup and step code: on failure, `error` (a std::string
// in the caller's scope) gets a message naming the call and the function returns false.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "bench/rank_session.hpp"
#include "epcomm/epcomm.h"

#define TRY_EPC(call, what)        \
  do {                             \
    const EpcStatus s_ = (call);   \
    if (s_ != EPC_OK) {            \
      error = epc_error(what, s_); \
      return false;                \
    }                              \
  } while (0)

#define TRY_CUDA(call, what)        \
  do {                              \
    const cudaError_t c_ = (call);  \
    if (c_ != cudaSuccess) {        \
      error = cuda_error(what, c_); \
      return false;                 \
    }                               \
  } while (0)

#define TRY_NCCL(call, what)                                     \
  do {                                                           \
    const ncclResult_t n_ = (call);                              \
    if (n_ != ncclSuccess) {                                     \
      error = std::string(what) + ": " + ncclGetErrorString(n_); \
      return false;                                              \
    }                                                            \
  } while (0)
