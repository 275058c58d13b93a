// SPDX-License-Identifier: Apache-2.0
// Whether a group whose ranks span LSA teams can use GIN, from what NCCL reported, and the
// messages group creation fails with. Pure logic (group.cpp gathers the report), so the
// decisions and their wording are unit-tested without NCCL.
//
// NCCL 2.28.9 has no query for GIN support (ncclCommQueryProperties and its ginType came
// in 2.29). What it does: ncclDevCommCreate, asked for GIN signals (or on a communicator
// spanning hosts), sets up GIN for the communicator and fails when it cannot, with
// ncclInvalidUsage ("GIN not supported": no GIN plugin) or ncclInternalError (GIN disabled
// by NCCL_GIN_ENABLE=0, or no GIN-capable NIC); on success the device communicator names its
// contexts (ginContextCount) and their backend (ginTypes). So the report is the outcome of
// creating the device communicator the plan needs, and ncclGetLastError's text.
#pragma once

#include <cstdint>
#include <string>

#include "core/topology.hpp"
#include "epcomm/epcomm.h"

namespace epc {

// ncclNetDeviceType values of NCCL's GIN backends (nccl_device/net_device.h); group.cpp
// checks they match.
constexpr int kGinBackendProxy = 2;  // NCCL_NET_DEVICE_GIN_PROXY: a CPU thread posts the work
constexpr int kGinBackendGdaki = 3;  // NCCL_NET_DEVICE_GIN_GDAKI: the GPU posts to the NIC
// The proxy backend carries signal ids in 16 bits (its work descriptor), so every signal a
// device communicator uses must lie below this (ginSignalBase + ginSignalCount).
constexpr uint64_t kGinProxySignalLimit = 65536;
// ncclResult_t values NCCL 2.28.9's GIN set-up fails with when there is no usable GIN
// (nccl.h); group.cpp checks they match.
constexpr int kNcclInternalErrorCode = 3;
constexpr int kNcclInvalidUsageCode = 5;

struct GinReport {
  uint32_t signals_requested = 0;  // ncclDevCommRequirements.ginSignalCount
  bool created = false;            // ncclDevCommCreate succeeded
  int nccl_result = 0;             // its ncclResult_t when it failed
  std::string nccl_result_text;    // ncclGetErrorString of it
  std::string nccl_last_error;     // ncclGetLastError(comm), possibly empty
  // From the device communicator, when created:
  int contexts = 0;           // ginContextCount
  int backend = 0;            // ginTypes[0]
  uint64_t signal_base = 0;   // ginSignalBase
  uint64_t signal_count = 0;  // ginSignalCount
};

struct GinVerdict {
  EpcStatus status = EPC_OK;  // EPC_OK: GIN can carry the group's traffic
  std::string message;
};

// Whether the GIN NCCL reported can carry a group on `topo` (ranks spanning LSA teams):
// EPC_ERR_UNSUPPORTED when NCCL could not set GIN up (ncclInvalidUsage, ncclInternalError)
// or set it up unusably (no context, an unknown backend, signal ids the proxy cannot
// carry); EPC_ERR_NCCL when creating the device communicator failed otherwise. Messages
// name what NCCL reported.
GinVerdict judge_gin(const Topology& topo, const GinReport& report);

}  // namespace epc
