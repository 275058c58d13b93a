// SPDX-License-Identifier: Apache-2.0
// The few CUPTI functions the bench calls, resolved at run time (dlopen, dlsym) with the
// types of the CUPTI headers, so that the bench links and runs where CUPTI is absent: there
// the CUPTI columns show "-" and the run says which libraries could not be loaded. CPU code
// only (nothing here talks to a GPU), unit-tested without one.
#pragma once

#include <cupti.h>

#include <string>
#include <vector>

namespace epc::bench {

// Where to look for CUPTI, in order: the names the dynamic loader resolves (LD_LIBRARY_PATH,
// the system's cache), then the same names in `exe_dir` (tools/gpu/stage.sh puts a copy beside
// the bench) and in each of `toolkit_dirs` (the CUDA toolkit the bench was built with).
std::vector<std::string> cupti_candidates(const std::string& exe_dir, const std::vector<std::string>& toolkit_dirs);

// Where a CUDA toolkit installed at `home` keeps CUPTI: lib64, lib, extras/CUPTI/lib64.
std::vector<std::string> toolkit_lib_dirs(const std::string& home);

// The library names tried first: the CUPTI of the CUDA major the headers are from, then any.
extern const char* const kCuptiNames[2];

class CuptiLibrary {
 public:
  CuptiLibrary() = default;
  ~CuptiLibrary();
  CuptiLibrary(const CuptiLibrary&) = delete;
  CuptiLibrary& operator=(const CuptiLibrary&) = delete;

  // Opens the first candidate that loads, resolves every function below and checks that its
  // version has the headers' major (activity records change layout between majors). False
  // with `error` naming each candidate and why it failed.
  bool load(const std::vector<std::string>& candidates, std::string& error);
  bool loaded() const { return handle_ != nullptr; }
  const std::string& path() const { return path_; }
  // Once CUPTI has hooked into the CUDA driver, unloading it would leave the driver calling
  // into unmapped code: after this the destructor leaves the library loaded.
  void keep_loaded() { keep_ = true; }

  // "CUPTI_ERROR_...: text" for a result.
  std::string describe(CUptiResult result) const;

  decltype(&cuptiGetVersion) get_version = nullptr;
  decltype(&cuptiGetResultString) get_result_string = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped_records = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push_external_id = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop_external_id = nullptr;

 private:
  bool resolve(void* handle, const std::string& name, std::string& error);
  void close();

  void* handle_ = nullptr;
  std::string path_;
  bool keep_ = false;
};

}  // namespace epc::bench
