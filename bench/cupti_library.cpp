// SPDX-License-Identifier: Apache-2.0
#include "bench/cupti_library.hpp"

#include <dlfcn.h>

#include <cupti_version.h>

namespace epc::bench {
namespace {

template <typename Function>
bool symbol(void* handle, const char* name, Function& out, std::string& missing) {
  out = reinterpret_cast<Function>(dlsym(handle, name));
  if (out == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
  return out != nullptr;
}

std::string dl_error() {
  const char* text = dlerror();
  return text != nullptr ? text : "unknown dlopen error";
}

}  // namespace

const char* const kCuptiNames[2] = {"libcupti.so.13", "libcupti.so"};

static_assert(CUPTI_API_VERSION / 10000 == 13, "kCuptiNames names the CUPTI of the headers' CUDA major");

std::vector<std::string> cupti_candidates(const std::string& exe_dir, const std::vector<std::string>& toolkit_dirs) {
  std::vector<std::string> out(std::begin(kCuptiNames), std::end(kCuptiNames));
  std::vector<std::string> dirs;
  if (!exe_dir.empty()) dirs.push_back(exe_dir);
  dirs.insert(dirs.end(), toolkit_dirs.begin(), toolkit_dirs.end());
  for (const std::string& dir : dirs) {
    for (const char* name : kCuptiNames) out.push_back(dir + "/" + name);
  }
  return out;
}

std::vector<std::string> toolkit_lib_dirs(const std::string& home) {
  if (home.empty()) return {};
  return {home + "/lib64", home + "/lib", home + "/extras/CUPTI/lib64"};
}

CuptiLibrary::~CuptiLibrary() { close(); }

void CuptiLibrary::close() {
  if (handle_ != nullptr && !keep_) dlclose(handle_);
  handle_ = nullptr;
  path_.clear();
}

bool CuptiLibrary::resolve(void* handle, const std::string& name, std::string& error) {
  std::string missing;
  // Every lookup runs, so the message lists every missing function at once.
  bool ok = symbol(handle, "cuptiGetVersion", get_version, missing);
  ok = symbol(handle, "cuptiGetResultString", get_result_string, missing) && ok;
  ok = symbol(handle, "cuptiActivityRegisterCallbacks", register_callbacks, missing) && ok;
  ok = symbol(handle, "cuptiActivityEnable", enable, missing) && ok;
  ok = symbol(handle, "cuptiActivityDisable", disable, missing) && ok;
  ok = symbol(handle, "cuptiActivityFlushAll", flush_all, missing) && ok;
  ok = symbol(handle, "cuptiActivityGetNextRecord", next_record, missing) && ok;
  ok = symbol(handle, "cuptiActivityGetNumDroppedRecords", dropped_records, missing) && ok;
  ok = symbol(handle, "cuptiActivityPushExternalCorrelationId", push_external_id, missing) && ok;
  ok = symbol(handle, "cuptiActivityPopExternalCorrelationId", pop_external_id, missing) && ok;
  if (!ok) {
    error = name + " lacks " + missing;
    return false;
  }
  uint32_t version = 0;
  const CUptiResult r = get_version(&version);
  if (r != CUPTI_SUCCESS) {
    error = name + ": cuptiGetVersion failed (" + std::to_string(static_cast<int>(r)) + ")";
    return false;
  }
  if (version / 10000 != CUPTI_API_VERSION / 10000) {
    error = name + " is CUPTI API version " + std::to_string(version) + "; the bench was built with the headers of " +
            std::to_string(CUPTI_API_VERSION) + " and reads activity records of that major only";
    return false;
  }
  return true;
}

bool CuptiLibrary::load(const std::vector<std::string>& candidates, std::string& error) {
  close();
  std::string tried;
  for (const std::string& name : candidates) {
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string why;
    if (handle == nullptr) {
      why = dl_error();
    } else if (!resolve(handle, name, why)) {
      dlclose(handle);
      handle = nullptr;
    }
    if (handle != nullptr) {
      handle_ = handle;
      path_ = name;
      return true;
    }
    tried += (tried.empty() ? "" : "; ") + why;
  }
  error = candidates.empty() ? "no CUPTI library to try" : "CUPTI could not be loaded (" + tried + ")";
  return false;
}

std::string CuptiLibrary::describe(CUptiResult result) const {
  const char* text = nullptr;
  if (get_result_string == nullptr || get_result_string(result, &text) != CUPTI_SUCCESS || text == nullptr) {
    return "CUPTI error " + std::to_string(static_cast<int>(result));
  }
  return text;
}

}  // namespace epc::bench
