// SPDX-License-Identifier: Apache-2.0
// Asking NCCL 2.28.9 for GIN. It has no query (core/gin_support.hpp): creating a device
// communicator with GIN resources is the question. Asked of the group's own communicator,
// a "no" would break it: NCCL marks GIN enabled before it tries to connect and never clears
// the mark, so the next ncclDevCommCreate on that communicator skips the connection and
// crashes on the state it never set up (docs/reliability.md). So the question is first
// asked of a throw-away communicator split from it (the same ranks on the same hosts).
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include "core/deadline.hpp"
#include "core/gin_support.hpp"

namespace epc {

// ncclDevCommCreate(comm, reqs, out) and what NCCL said, for judge_gin. Throws StrandedCall
// (core/nccl_wait.hpp) when NCCL has not finished it by `deadline`.
GinReport create_gin_device_comm(ncclComm_t comm, const ncclDevCommRequirements& reqs, ncclDevComm* out,
                                 const Deadline& deadline);

// The same on a communicator split from `comm` (collective over `comm`, like the split),
// which is destroyed again; `comm` itself is not touched. Throws epc::Error (EPC_ERR_NCCL)
// when the split fails, StrandedCall when the split or the creation has not finished by
// `deadline`.
GinReport probe_gin(ncclComm_t comm, int rank, const ncclDevCommRequirements& reqs, const Deadline& deadline);

}  // namespace epc
