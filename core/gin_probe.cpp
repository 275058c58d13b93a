// SPDX-License-Identifier: Apache-2.0
#include "core/gin_probe.hpp"

#include "core/gpu_check.hpp"
#include "core/nccl_wait.hpp"

namespace epc {

GinReport create_gin_device_comm(ncclComm_t comm, const ncclDevCommRequirements& reqs, ncclDevComm* out,
                                 const Deadline& deadline) {
  const ncclResult_t res = settle_nccl(comm, ncclDevCommCreate(comm, &reqs, out), "ncclDevCommCreate", deadline);
  GinReport report;
  report.signals_requested = static_cast<uint32_t>(reqs.ginSignalCount);
  report.created = res == ncclSuccess;
  report.nccl_result = static_cast<int>(res);
  report.nccl_result_text = ncclGetErrorString(res);
  if (res == ncclSuccess) {
    report.contexts = out->ginContextCount;
    report.backend = out->ginContextCount > 0 ? out->ginTypes[0] : 0;
    report.signal_base = out->ginSignalBase;
    report.signal_count = static_cast<uint64_t>(out->ginSignalCount);
  } else {
    const char* last = ncclGetLastError(comm);
    report.nccl_last_error = last != nullptr ? last : "";
  }
  return report;
}

GinReport probe_gin(ncclComm_t comm, int rank, const ncclDevCommRequirements& reqs, const Deadline& deadline) {
  ncclComm_t probe = nullptr;
  constexpr const char* kSplit = "ncclCommSplit (a throw-away communicator to ask NCCL for GIN on)";
  // On a non-blocking communicator the split goes on in the background on the new one.
  const ncclResult_t split = ncclCommSplit(comm, 0, rank, &probe, nullptr);
  finish_nccl(probe != nullptr ? probe : comm, split, kSplit, deadline);
  ncclDevComm dev{};
  const GinReport report = create_gin_device_comm(probe, reqs, &dev, deadline);
  // Failures of the clean-up change nothing about the answer, and the group's own
  // communicator does not depend on them.
  if (report.created) ncclDevCommDestroy(probe, &dev);
  ncclCommDestroy(probe);
  return report;
}

}  // namespace epc
