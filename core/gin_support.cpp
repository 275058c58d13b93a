// SPDX-License-Identifier: Apache-2.0
#include "core/gin_support.hpp"

#include "core/error.hpp"

namespace epc {

namespace {

std::string spanning(const Topology& t) {
  return format("the %d ranks span %d NVLink (LSA) domains of %d ranks", t.nranks, t.num_nodes, t.lsa_size);
}

std::string nccl_said(const GinReport& r) {
  std::string said = format("ncclDevCommCreate with %u GIN signals returned %s (%d)", r.signals_requested,
                            r.nccl_result_text.c_str(), r.nccl_result);
  if (!r.nccl_last_error.empty()) said += format(": \"%s\"", r.nccl_last_error.c_str());
  return said;
}

}  // namespace

GinVerdict judge_gin(const Topology& t, const GinReport& r) {
  GinVerdict v;
  if (!r.created) {
    const bool no_gin = r.nccl_result == kNcclInvalidUsageCode || r.nccl_result == kNcclInternalErrorCode;
    v.status = no_gin ? EPC_ERR_UNSUPPORTED : EPC_ERR_NCCL;
    v.message = format(
        "%s, so epcomm needs NCCL's GPU-initiated networking (GIN) between them, but "
        "%s. NCCL 2.28.9 answers this way when it has no GIN plugin, no GIN-capable "
        "NIC, or NCCL_GIN_ENABLE=0, or when its signal pool (NCCL_GIN_SIGNAL_POOL_SIZE, "
        "65536 by default) cannot hold the signals requested",
        spanning(t).c_str(), nccl_said(r).c_str());
    return v;
  }
  v.status = EPC_ERR_UNSUPPORTED;
  if (r.contexts < 1) {
    v.message = format(
        "%s, so epcomm needs GIN between them, but NCCL created the device communicator "
        "without a GIN context (ginContextCount %d)",
        spanning(t).c_str(), r.contexts);
    return v;
  }
  if (r.backend != kGinBackendProxy && r.backend != kGinBackendGdaki) {
    v.message = format(
        "%s, so epcomm needs GIN between them, but NCCL's GIN backend is of type %d, "
        "neither proxy (%d) nor GDAKI (%d), the two epcomm was compiled for",
        spanning(t).c_str(), r.backend, kGinBackendProxy, kGinBackendGdaki);
    return v;
  }
  if (r.backend == kGinBackendProxy && r.signal_base + r.signal_count > kGinProxySignalLimit) {
    v.message = format(
        "%s; NCCL gave the group GIN signals %llu to %llu, but its proxy GIN backend "
        "carries signal ids in 16 bits (below %llu): use fewer tokens per rank or fewer "
        "ranks (the plan's gin_signals), or fewer device communicators on this "
        "communicator",
        spanning(t).c_str(), static_cast<unsigned long long>(r.signal_base),
        static_cast<unsigned long long>(r.signal_base + r.signal_count - 1),
        static_cast<unsigned long long>(kGinProxySignalLimit));
    return v;
  }
  v.status = EPC_OK;
  return v;
}

}  // namespace epc
