// SPDX-License-Identifier: Apache-2.0
// Communicator bootstrap for callers without an NCCL binding of their own.
#pragma once

#include <cstdint>

#include "epcomm/epcomm.h"

namespace epc {

EpcUniqueId create_unique_id();
// Returns an ncclComm_t as void*. timeout_ms 0: a blocking communicator, made without a
// bound; otherwise a non-blocking one, made within timeout_ms (EPC_ERR_TIMEOUT after it, with
// what NCCL made aborted) and finalized within timeout_ms by destroy_comm.
void* init_comm(const EpcUniqueId& id, int nranks, int rank, int cuda_device, uint32_t timeout_ms);
void destroy_comm(void* comm);

}  // namespace epc
