// SPDX-License-Identifier: Apache-2.0
#include "core/nccl_runtime.hpp"

#include <dlfcn.h>
#include <nccl.h>

#include <atomic>

#include "core/error.hpp"

namespace epc {

namespace {

std::string version_text(int code) {
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z for every version with a Device API.
  return format("%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
}

std::string library_path() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) != 0 && info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return "libnccl.so";
}

void check_once() {
  int runtime = 0;
  ncclResult_t res = ncclGetVersion(&runtime);
  if (res != ncclSuccess) {
    fail(EPC_ERR_NCCL, format("ncclGetVersion failed: %s", ncclGetErrorString(res)));
  }
  const int compiled = NCCL_VERSION_CODE;
  bool same_series = runtime / 100 == compiled / 100;
  if (!same_series || runtime < compiled) {
    fail(EPC_ERR_NCCL, format("the NCCL loaded at run time (%s, from %s) does not provide the Device API "
                              "epcomm was compiled against (NCCL %s): load NCCL %d.%d.x with x >= %d, e.g. "
                              "by putting its lib directory first in LD_LIBRARY_PATH",
                              version_text(runtime).c_str(), library_path().c_str(), version_text(compiled).c_str(),
                              compiled / 10000, compiled / 100 % 100, compiled % 100));
  }
}

}  // namespace

void check_nccl_runtime() {
  // The answer cannot change within a process; remember a success (but retry failures so
  // the message is produced on every call that needs it).
  static std::atomic<bool> ok{false};
  if (ok.load(std::memory_order_acquire)) return;
  check_once();
  ok.store(true, std::memory_order_release);
}

}  // namespace epc
