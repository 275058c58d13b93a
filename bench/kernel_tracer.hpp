// SPDX-License-Identifier: Apache-2.0
// Records the kernels this process runs, through CUPTI's activity API, for the kernel spans
// of bench/kernel_spans.hpp: CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL (start and end of every
// kernel, without serialising them as the KERNEL kind would), the runtime and driver API
// records (CUPTI links external ids to those), and the external correlation records that
// link each API call to the tag the bench pushed around it.
//
// Recording costs host time at every launch, so the bench records in passes of its own and
// never while it times with CUDA events or the host clock. CUPTI's buffer callbacks carry no
// user pointer: there is at most one tracer per process.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench/kernel_spans.hpp"
#include "bench/timing.hpp"

namespace epc::bench {

class KernelTracer {
 public:
  KernelTracer() = default;
  ~KernelTracer();
  KernelTracer(const KernelTracer&) = delete;
  KernelTracer& operator=(const KernelTracer&) = delete;

  // Loads CUPTI (bench/cupti_library.hpp) and hands it the buffer callbacks. False with `why`
  // when CUPTI cannot be used in this process; the tracer then stays unusable.
  bool open(std::string& why);
  // Opened, and not broken by a flush that did not finish.
  bool usable() const;
  const std::string& library() const { return library_; }

  // Begins a recording: forgets what earlier ones left and enables the activity kinds.
  bool start(std::string& error);
  // Ends it. Call after the stream is synchronised: flushes CUPTI's buffers (bounded: a
  // flush that does not end within kFlushSeconds makes the tracer unusable), disables the
  // kinds and returns what was recorded, tags as pushed. False when CUPTI failed or dropped
  // records, or a tag could not be pushed or popped.
  bool stop(std::vector<KernelRecord>& kernels, std::vector<TagLink>& links, std::string& error);
  static constexpr int kFlushSeconds = 20;

  // While recording: links the calling thread's API calls to `tag` (in place of a tag
  // pushed before) until pop(); pop() without a tag does nothing. Errors wait for stop().
  void push(uint64_t tag);
  void pop();

 private:
  bool enable_kinds(bool on, std::string& error);

  bool open_ = false;
  bool recording_ = false;
  bool pushed_ = false;
  uint64_t generation_ = 0;  // of the recording, in every pushed id
  std::string library_;
  std::string tag_error_;
};

// The step marks of bench/mode_support.hpp turned into tags: each mark but the last pushes
// the tag (iteration, mark) in place of the previous one, so every API call between two
// marks is linked to the part of the step that the first of them opens; `end_mark` pops.
class TagMarks final : public StepMarks {
 public:
  TagMarks(KernelTracer& tracer, int end_mark) : tracer_(tracer), end_mark_(end_mark) {}
  ~TagMarks() override;
  void record(int iter, int mark, cudaStream_t stream) override;

 private:
  KernelTracer& tracer_;
  int end_mark_;
};

}  // namespace epc::bench
