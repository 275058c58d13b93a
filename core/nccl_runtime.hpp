// SPDX-License-Identifier: Apache-2.0
// The NCCL found at run time must provide the Device API this library was compiled
// against: the device communicator's layout is shared between NCCL's host code and our
// kernels, so a different 2.x series, or an older patch release, is refused up front.
#pragma once

namespace epc {

// Throws EPC_ERR_NCCL with the versions and the library's path when they do not fit.
void check_nccl_runtime();

}  // namespace epc
