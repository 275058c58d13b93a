// SPDX-License-Identifier: Apache-2.0
// Communicator bootstrap for callers without an NCCL binding of their own.
#pragma once

#include "epcomm/epcomm.h"

namespace epc {

EpcUniqueId create_unique_id();
// Returns an ncclComm_t as void*.
void* init_comm(const EpcUniqueId& id, int nranks, int rank, int cuda_device);
void destroy_comm(void* comm);

}  // namespace epc
