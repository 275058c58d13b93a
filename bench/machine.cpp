// SPDX-License-Identifier: Apache-2.0
#include "bench/machine.hpp"

#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "bench/build_commit.hpp"
#include "epcomm/epcomm.h"

namespace epc::bench {
namespace {

struct GpuRecord {  // fixed size: it travels through an all-gather
  int32_t rank;
  int32_t device;
  char name[128];
  char pci_bus_id[32];
};

std::string nccl_version_text(int code) {
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

std::string cuda_version_text(int code) { return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 10); }

// The kernel module's version from /proc/driver/nvidia/version, whose first line reads
// "NVRM version: NVIDIA UNIX [Open ]Kernel Module [for x86_64]  580.159.04  Release Build ...":
// the first word made of digits and dots only, with at least one dot.
std::string nvidia_driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(f, line)) return "unknown";
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    const bool version_like =
        word.find('.') != std::string::npos && word.find_first_not_of("0123456789.") == std::string::npos;
    if (version_like) return word;
  }
  return "unknown";
}

}  // namespace

bool describe_machine(RankSession& session, MachineInfo& out, std::string& error) {
  GpuRecord mine;
  std::memset(&mine, 0, sizeof mine);
  mine.rank = session.rank();
  mine.device = session.device();
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, session.device()) == cudaSuccess) {
    std::snprintf(mine.name, sizeof mine.name, "%.127s", prop.name);
  } else {
    std::snprintf(mine.name, sizeof mine.name, "unknown");
  }
  if (cudaDeviceGetPCIBusId(mine.pci_bus_id, sizeof mine.pci_bus_id, session.device()) != cudaSuccess) {
    std::snprintf(mine.pci_bus_id, sizeof mine.pci_bus_id, "unknown");
  }
  std::vector<uint8_t> all;
  if (!session.allgather(&mine, sizeof mine, all, error)) return false;

  MachineInfo m;
  char host[256] = {0};
  m.hostname = gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  for (int r = 0; r < session.nranks(); ++r) {
    GpuRecord g;
    std::memcpy(&g, all.data() + static_cast<size_t>(r) * sizeof g, sizeof g);
    g.name[sizeof g.name - 1] = '\0';
    g.pci_bus_id[sizeof g.pci_bus_id - 1] = '\0';
    m.gpus.push_back(GpuInfo{g.rank, g.device, g.name, g.pci_bus_id});
  }
  int v = 0;
  m.nccl_runtime = ncclGetVersion(&v) == ncclSuccess ? nccl_version_text(v) : "unknown";
  m.nccl_headers = nccl_version_text(NCCL_VERSION_CODE);
  Dl_info where;
  m.nccl_library = dladdr(reinterpret_cast<void*>(&ncclGetVersion), &where) != 0 && where.dli_fname != nullptr
                       ? where.dli_fname
                       : "unknown";
  m.cuda_driver = cudaDriverGetVersion(&v) == cudaSuccess ? cuda_version_text(v) : "unknown";
  m.cuda_runtime = cudaRuntimeGetVersion(&v) == cudaSuccess ? cuda_version_text(v) : "unknown";
  m.nvidia_driver = nvidia_driver_version();
  uint32_t major = 0, minor = 0, patch = 0;
  epc_get_version(&major, &minor, &patch);
  m.epcomm_abi = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  m.epcomm_commit = kBuildCommit;
  out = m;
  return true;
}

}  // namespace epc::bench
