// SPDX-License-Identifier: Apache-2.0
#include "bench/kernel_tracer.hpp"

#include <cupti.h>
#include <limits.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "bench/cupti_library.hpp"

namespace epc::bench {
namespace {

constexpr CUpti_ExternalCorrelationKind kTagKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
constexpr size_t kBufferBytes = size_t{4} << 20;
// A pushed id is the recording's generation above a call tag (bench/kernel_spans.hpp), so a
// link CUPTI delivers late, from an earlier recording, can never pass for one of this one.
constexpr int kGenerationShift = 48;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

// What CUPTI's callbacks fill. Never destroyed: CUPTI's worker thread may deliver a buffer
// at any time, even while the process exits, and the library stays loaded for it.
struct Sink {
  CuptiLibrary cupti;
  std::mutex mutex;
  std::vector<KernelRecord> kernels;
  std::vector<TagLink> links;  // external ids as pushed (generation and tag)
  size_t dropped = 0;
  bool taken = false;  // a tracer is open in this process
};

Sink& sink() {
  static Sink* s = new Sink;
  return *s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  Sink& s = sink();
  std::vector<KernelRecord> kernels;
  std::vector<TagLink> links;
  CUpti_Activity* record = nullptr;
  while (buffer != nullptr && s.cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      // The record of the headers' CUPTI major, which CuptiLibrary::load insists on.
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      KernelRecord r;
      r.start_ns = k->start;
      r.end_ns = k->end;
      r.device = k->deviceId;
      r.correlation = k->correlationId;
      r.graph = k->graphId;
      r.graph_node = k->graphNodeId;
      kernels.push_back(r);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
      const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
      if (e->externalKind == kTagKind) links.push_back(TagLink{e->correlationId, e->externalId});
    }
  }
  size_t dropped = 0;
  if (s.cupti.dropped_records(context, stream, &dropped) != CUPTI_SUCCESS) dropped = 0;
  std::free(buffer);
  std::lock_guard<std::mutex> lock(s.mutex);
  s.kernels.insert(s.kernels.end(), kernels.begin(), kernels.end());
  s.links.insert(s.links.end(), links.begin(), links.end());
  s.dropped += dropped;
}

std::string exe_dir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return {};
  const std::string exe(path, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? std::string() : exe.substr(0, slash);
}

std::vector<std::string> toolkit_dirs() {
#ifdef EPC_BENCH_CUDA_HOME
  return toolkit_lib_dirs(EPC_BENCH_CUDA_HOME);
#else
  return {};
#endif
}

}  // namespace

KernelTracer::~KernelTracer() {
  if (!open_) return;
  if (recording_) {
    std::vector<KernelRecord> kernels;
    std::vector<TagLink> links;
    std::string ignored;
    stop(kernels, links, ignored);
  }
  sink().taken = false;
}

bool KernelTracer::open(std::string& why) {
  Sink& s = sink();
  if (open_) return true;
  if (s.taken) {
    why = "another KernelTracer is open in this process (CUPTI's callbacks have no user pointer)";
    return false;
  }
  if (!s.cupti.loaded() && !s.cupti.load(cupti_candidates(exe_dir(), toolkit_dirs()), why)) return false;
  const CUptiResult r = s.cupti.register_callbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) {
    why = s.cupti.path() + ": cuptiActivityRegisterCallbacks: " + s.cupti.describe(r);
    return false;
  }
  s.cupti.keep_loaded();
  s.taken = true;
  open_ = true;
  library_ = s.cupti.path();
  return true;
}

bool KernelTracer::usable() const { return open_; }

bool KernelTracer::enable_kinds(bool on, std::string& error) {
  const CuptiLibrary& cupti = sink().cupti;
  bool ok = true;
  for (CUpti_ActivityKind kind : kKinds) {
    const CUptiResult r = on ? cupti.enable(kind) : cupti.disable(kind);
    if (r != CUPTI_SUCCESS && ok) {
      error = std::string(on ? "cuptiActivityEnable" : "cuptiActivityDisable") + "(kind " +
              std::to_string(static_cast<int>(kind)) + "): " + cupti.describe(r);
      ok = false;
    }
  }
  return ok;
}

bool KernelTracer::start(std::string& error) {
  if (!open_) {
    error = "the kernel tracer is not open";
    return false;
  }
  if (recording_) {
    error = "the kernel tracer is already recording";
    return false;
  }
  {
    Sink& s = sink();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.kernels.clear();
    s.links.clear();
    s.dropped = 0;
  }
  ++generation_;
  tag_error_.clear();
  pushed_ = false;
  if (!enable_kinds(true, error)) {
    std::string ignored;
    enable_kinds(false, ignored);
    return false;
  }
  recording_ = true;
  return true;
}

bool KernelTracer::stop(std::vector<KernelRecord>& kernels, std::vector<TagLink>& links, std::string& error) {
  kernels.clear();
  links.clear();
  if (!recording_) {
    error = "the kernel tracer is not recording";
    return false;
  }
  recording_ = false;
  if (pushed_) pop();
  // CUPTI's flush cannot be interrupted; the wait for it can. The helper thread and the sink
  // it uses outlive a flush that never ends.
  auto flushed = std::make_shared<std::promise<CUptiResult>>();
  std::future<CUptiResult> result = flushed->get_future();
  std::thread([flushed] { flushed->set_value(sink().cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)); }).detach();
  if (result.wait_for(std::chrono::seconds(kFlushSeconds)) != std::future_status::ready) {
    open_ = false;  // unusable from now on: another call into CUPTI might wait as long
    error = "CUPTI did not flush its activity buffers within " + std::to_string(kFlushSeconds) +
            " s; kernel spans are off for the rest of the run";
    return false;
  }
  const CUptiResult r = result.get();
  std::string disable_error;
  const bool disabled = enable_kinds(false, disable_error);
  if (r != CUPTI_SUCCESS) {
    error = "cuptiActivityFlushAll: " + sink().cupti.describe(r);
    return false;
  }
  if (!disabled) {
    error = disable_error;
    return false;
  }
  Sink& s = sink();
  size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    kernels.swap(s.kernels);
    for (const TagLink& link : s.links) {
      if (link.tag >> kGenerationShift != generation_) continue;
      links.push_back(TagLink{link.correlation, link.tag & ((uint64_t{1} << kGenerationShift) - 1)});
    }
    s.links.clear();
    dropped = s.dropped;
  }
  if (!tag_error_.empty()) {
    error = tag_error_;
    return false;
  }
  if (dropped > 0) {
    error = "CUPTI dropped " + std::to_string(dropped) + " activity records (its buffers were full)";
    return false;
  }
  return true;
}

void KernelTracer::push(uint64_t tag) {
  if (!recording_) return;
  if (pushed_) pop();
  const CUptiResult r = sink().cupti.push_external_id(kTagKind, generation_ << kGenerationShift | tag);
  pushed_ = r == CUPTI_SUCCESS;
  if (!pushed_ && tag_error_.empty()) {
    tag_error_ = "cuptiActivityPushExternalCorrelationId: " + sink().cupti.describe(r);
  }
}

void KernelTracer::pop() {
  if (!pushed_) return;
  pushed_ = false;
  uint64_t last = 0;
  const CUptiResult r = sink().cupti.pop_external_id(kTagKind, &last);
  if (r != CUPTI_SUCCESS && tag_error_.empty()) {
    tag_error_ = "cuptiActivityPopExternalCorrelationId: " + sink().cupti.describe(r);
  }
}

TagMarks::~TagMarks() { tracer_.pop(); }

void TagMarks::record(int iter, int mark, cudaStream_t) {
  if (mark == end_mark_) {
    tracer_.pop();
  } else {
    tracer_.push(call_tag(iter, mark));  // in place of the previous part's
  }
}

}  // namespace epc::bench
