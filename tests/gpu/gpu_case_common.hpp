// SPDX-License-Identifier: Apache-2.0
// What the dispatch/combine GPU tests of both modes share (ll_case, ht_case): status helpers
// that turn epcomm and CUDA results into AssertionResults, owners for groups, handles,
// streams, device memory and CUDA graphs, tensor descriptors, deterministic random values,
// bitwise comparison with a one-line report, graph capture that every rank agrees on, and a
// cross-rank "did everyone succeed" vote.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "epcomm/epcomm.h"
#include "tests/reference/problem_gen.hpp"

namespace epc::gputest {

// After this many failing steps a long test stops printing (it still runs and checks every
// step, so the collectives stay aligned, and fails).
constexpr int kMaxReportedSteps = 3;

// ---- Status helpers ---------------------------------------------------------------------

// Success, or a failure naming `what`, the status and epc_last_error() (read at once, on the
// calling thread, so call this directly on the epc_* call's result).
::testing::AssertionResult epc_ok(EpcStatus status, const std::string& what);
::testing::AssertionResult cuda_ok(cudaError_t error, const std::string& what);

// ---- The group's asynchronous error -----------------------------------------------------

// What epc_group_async_error returned, and the message it left ("" with EPC_OK).
struct AsyncError {
  EpcStatus status = EPC_OK;
  std::string message;
};
AsyncError async_error(const EpcGroup* group);

// epc_group_async_error, again every millisecond and without synchronising anything, until
// it reports a failure or `limit_seconds` have passed: its last answer. Local.
AsyncError poll_async_error(const EpcGroup* group, double limit_seconds);

// ---- Owners -----------------------------------------------------------------------------

// epc_group_destroy / epc_handle_destroy on scope exit; a failure there is a test failure.
struct GroupDeleter {
  void operator()(EpcGroup* group) const;
};
using GroupPtr = std::unique_ptr<EpcGroup, GroupDeleter>;

struct HandleDeleter {
  void operator()(EpcHandle* handle) const;
};
using HandlePtr = std::unique_ptr<EpcHandle, HandleDeleter>;

// A non-blocking stream, destroyed (after synchronising) on scope exit.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ::testing::AssertionResult status() const;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
  cudaError_t create_error_ = cudaSuccess;
};

struct CudaFreeDeleter {
  void operator()(void* ptr) const { cudaFree(ptr); }
};

// Plain device memory (cudaMalloc), movable.
class DeviceMemory {
 public:
  ::testing::AssertionResult allocate(std::size_t bytes, const std::string& what);
  void* get() const { return ptr_.get(); }
  std::size_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<void, CudaFreeDeleter> ptr_;
  std::size_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost), movable: what out_expert_counts_host needs.
struct CudaFreeHostDeleter {
  void operator()(void* ptr) const { cudaFreeHost(ptr); }
};
class PinnedMemory {
 public:
  ::testing::AssertionResult allocate(std::size_t bytes, const std::string& what);
  void* get() const { return ptr_.get(); }
  std::size_t bytes() const { return bytes_; }
  // Fills the memory with 0xFF bytes (int32 -1) from a host function queued on `stream`, so
  // that it happens after the work queued before it. Nothing if never allocated.
  ::testing::AssertionResult poison(cudaStream_t stream, const std::string& what) const;

 private:
  std::unique_ptr<void, CudaFreeHostDeleter> ptr_;
  std::size_t bytes_ = 0;
};

struct GraphExecDeleter {
  void operator()(cudaGraphExec_t exec) const { cudaGraphExecDestroy(exec); }
};
using GraphExecPtr = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDeleter>;

// ---- Shapes and groups ---------------------------------------------------------------------

// A group's shape: what EpcGroupConfig and the tests' buffers are sized from.
struct Shape {
  int nranks = 0;
  int num_experts = 0;  // E
  int hidden = 0;       // H
  int max_tokens = 0;   // T (the group's max_tokens_per_rank and Problem::max_tokens)
  int max_topk = 0;     // the group's max_topk; problems may use any K <= max_topk

  int local_experts() const { return num_experts / nranks; }  // L
  // R * T: the rows one LL expert buffer holds, the rows of an HT CAPACITY handle.
  int max_rows() const { return nranks * max_tokens; }
  std::size_t expert_major_elements() const {  // L * R*T * H: LL's [L, R*T, H] buffers
    return static_cast<std::size_t>(local_experts()) * max_rows() * hidden;
  }
};

// A shape for the current world: E = experts_per_rank * world size.
Shape world_shape(int experts_per_rank, int hidden, int max_tokens, int max_topk);

// Virtual node sizes that split the current world into two nodes or more (2 ranks: 1;
// 4 ranks: 1 and 2), for the tests that run the cross-node paths on one host.
std::vector<int> split_node_sizes();

// `mode`, E/H/T/max_topk from the shape, timeout_ms test_timeout_ms() (20000 unless
// EPCOMM_TEST_TIMEOUT_MS says otherwise). `window` is the payload the window is sized for:
// BF16 (max_token_bytes 0: 2 * H, 16-bit and fp8 payloads) or FP8_E4M3 (max_token_bytes
// H + H / 32: fp8 payloads only).
EpcGroupConfig group_config(const Shape& shape, EpcMode mode, EpcDtype window = EPC_DTYPE_BF16);

// epc_group_create(group_config(...)) on the process's communicator, with EpcGroupConfig.flags
// `group_flags` (EPC_GROUP_*).
::testing::AssertionResult create_group(const Shape& shape, EpcMode mode, GroupPtr& out,
                                        EpcDtype window = EPC_DTYPE_BF16, uint32_t group_flags = 0);

// ---- Handles ---------------------------------------------------------------------------------

// EPC_HANDLE_CONFIG_INIT with `sizing` and `flags`, every other field default.
EpcHandleConfig handle_config(EpcSizing sizing = EPC_SIZING_CAPACITY, uint32_t flags = 0);

// epc_handle_create(group, config, routing or NULL, stream); `topk_idx` NULL creates a handle
// without routing.
::testing::AssertionResult create_handle_with(EpcGroup* group, const EpcHandleConfig& config, const EpcTensor* topk_idx,
                                              cudaStream_t stream, HandlePtr& out, const std::string& what);
// epc_handle_update(handle, {topk_idx}, stream).
EpcStatus update_routing(EpcHandle* handle, const EpcTensor& topk_idx, cudaStream_t stream);

// epc_handle_query into `out`.
::testing::AssertionResult query_handle(const EpcHandle* handle, EpcHandleInfo& out);

// "EXACT" / "CAPACITY".
const char* sizing_name(EpcSizing sizing);

// The dtype of a combine `out` tensor as a name ("bf16", "fp16", "fp32").
const char* dtype_name(EpcDtype dtype);

// Generator options for a problem of this shape with `topk` entries per token (bf16 tokens,
// every rank B = T, no masking, no skew): tests adjust the fields they care about.
ref::ProblemGenOptions gen_options(const Shape& shape, int topk, uint64_t seed);

// ---- Tensors and transfers ----------------------------------------------------------------

// An EpcTensor over contiguous memory (strides all zero).
EpcTensor make_tensor(void* data, EpcDtype dtype, std::initializer_list<int64_t> shape);

// cudaMemcpyAsync host -> device / device -> host on `stream`; nothing for 0 bytes.
::testing::AssertionResult upload_bytes(void* dst, const void* src, std::size_t bytes, cudaStream_t stream,
                                        const std::string& what);
::testing::AssertionResult download_bytes(void* dst, const void* src, std::size_t bytes, cudaStream_t stream,
                                          const std::string& what);
// Uploads routing [entries] as int64 or (through `staging`) as int32, as `dtype` says.
::testing::AssertionResult upload_routing(void* dst, const std::vector<int64_t>& idx, EpcDtype dtype,
                                          std::vector<int32_t>& staging, cudaStream_t stream);
// One device -> host copy; skipped when `bytes` is 0.
struct Download {
  void* dst;
  const void* src;
  std::size_t bytes;
  const char* what;
};
// Queues every download on `stream`, then waits for the stream, always (even after a failed
// copy: the stream may still be running the step).
::testing::AssertionResult download_and_wait(std::initializer_list<Download> downloads, cudaStream_t stream);
// cudaMemsetAsync of the whole allocation with 0xFF bytes (bf16/fp32 NaN, int32 -1), so that
// nothing stale or unwritten can pass a comparison. Nothing if `memory` was never allocated.
::testing::AssertionResult poison(const DeviceMemory& memory, cudaStream_t stream, const std::string& what);

// ---- Deterministic values ------------------------------------------------------------------

// Raw mt19937_64 outputs only (the standard fixes their sequence), so every rank draws the
// same values. Uniform in [0, 1) with 24 random bits.
inline float unit_float(std::mt19937_64& engine) { return static_cast<float>(engine() >> 40) * 0x1.0p-24f; }
// Uniform in [-2, 2), rounded to bf16.
uint16_t random_bf16(std::mt19937_64& engine);

// ---- Bitwise comparison ---------------------------------------------------------------------

// "0x3f80", "0x3f80 (1)" (bf16 bits and value), "0x3f800000 (1)" (fp32 bits and value).
std::string hex_text(unsigned bits);
std::string bf16_text(uint16_t bits);
std::string fp32_text(float value);
std::string fp16_text(uint16_t bits);

// Counts elements whose bits differ over any number of compare() calls and keeps a
// description of the first one.
class Mismatches {
 public:
  // Compares got[i] with want[i] for i < n; describe(i, got[i], want[i]) -> std::string is
  // called for the first mismatch only.
  template <typename T, typename Describe>
  void compare(const T* got, const T* want, std::size_t n, Describe describe) {
    compared_ += n;
    for (std::size_t i = 0; i < n; ++i) {
      if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
      if (count_++ == 0) first_ = describe(i, got[i], want[i]);
    }
  }
  bool any() const { return count_ > 0; }
  // "<what>: <count> of <compared> compared elements differ; first at <first>"
  std::string summary(const std::string& what) const;

 private:
  std::size_t count_ = 0;
  std::size_t compared_ = 0;
  std::string first_;
};

// The outcome of checking one step: every failure is one ADD_FAILURE line prefixed with
// "[rank <rank>, <label>] " (or silent when `report` is false, for tests that cap how many
// failing steps they print); checking goes on after a failure.
class StepReport {
 public:
  StepReport(int rank, std::string label, bool report) : rank_(rank), label_(std::move(label)), report_(report) {}
  // Records a failure; returns false.
  bool fail(const std::string& message);
  // fail(m.summary(what)) when `m` found any mismatch.
  void check(const Mismatches& m, const std::string& what) {
    if (m.any()) fail(m.summary(what));
  }
  bool ok() const { return ok_; }

 private:
  int rank_;
  std::string label_;
  bool report_;
  bool ok_ = true;
};

// ---- Collective helpers ---------------------------------------------------------------------

// True on every rank iff `mine` is true on every rank (an NCCL all-reduce on the process's
// communicator, on its own stream). Collective: every rank must call it.
bool all_ranks_true(bool mine);

// Captures `body` on `stream` (cudaStreamCaptureModeGlobal) and instantiates the graph into
// `exec`. Collective (it ends with all_ranks_true), because replays are: the result is a
// success only if every rank captured; otherwise it names what failed here or says that
// another rank failed. Clears the sticky CUDA error of a failed capture.
::testing::AssertionResult capture_on_every_rank(cudaStream_t stream,
                                                 const std::function<::testing::AssertionResult()>& body,
                                                 GraphExecPtr& exec);

}  // namespace epc::gputest
