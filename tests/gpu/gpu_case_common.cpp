// SPDX-License-Identifier: Apache-2.0
// What the dispatch/combine GPU tests of both modes share; see gpu_case_common.hpp.
#include "tests/gpu/gpu_case_common.hpp"

#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "tests/gpu/rank_context.hpp"
#include "tests/reference/numeric.hpp"

namespace epc::gputest {

// ---- Status helpers ---------------------------------------------------------------------

::testing::AssertionResult epc_ok(EpcStatus status, const std::string& what) {
  if (status == EPC_OK) return ::testing::AssertionSuccess();
  // Read the message first: nothing else may run on this thread before it.
  const std::string message = last_error();
  return ::testing::AssertionFailure() << what << " failed on rank " << context().env.rank << ": "
                                       << epc_status_string(status) << " (" << status << "): " << message;
}

::testing::AssertionResult cuda_ok(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " failed on rank " << context().env.rank << ": "
                                       << cudaGetErrorName(error) << ": " << cudaGetErrorString(error);
}

// ---- The group's asynchronous error -----------------------------------------------------

AsyncError async_error(const EpcGroup* group) {
  AsyncError result;
  result.status = epc_group_async_error(group);
  if (result.status != EPC_OK) result.message = last_error();  // at once, on this thread
  return result;
}

AsyncError poll_async_error(const EpcGroup* group, double limit_seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(limit_seconds));
  AsyncError result = async_error(group);
  while (result.status == EPC_OK && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    result = async_error(group);
  }
  return result;
}

// ---- Owners -----------------------------------------------------------------------------

void GroupDeleter::operator()(EpcGroup* group) const {
  if (group == nullptr) return;
  EXPECT_TRUE(epc_ok(epc_group_destroy(group), "epc_group_destroy"));
}

void HandleDeleter::operator()(EpcHandle* handle) const {
  if (handle == nullptr) return;
  EXPECT_TRUE(epc_ok(epc_handle_destroy(handle), "epc_handle_destroy"));
}

Stream::Stream() { create_error_ = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); }

Stream::~Stream() {
  if (create_error_ != cudaSuccess || stream_ == nullptr) return;
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
}

::testing::AssertionResult Stream::status() const {
  return cuda_ok(create_error_, "cudaStreamCreateWithFlags(cudaStreamNonBlocking)");
}

::testing::AssertionResult DeviceMemory::allocate(std::size_t bytes, const std::string& what) {
  ptr_.reset();
  bytes_ = 0;
  void* ptr = nullptr;
  // Never ask for 0 bytes: a tensor with 0 rows still gets a valid, non-null pointer.
  const cudaError_t error = cudaMalloc(&ptr, bytes == 0 ? 16 : bytes);
  if (error != cudaSuccess) {
    return cuda_ok(error, "cudaMalloc(" + std::to_string(bytes) + " bytes) for " + what);
  }
  ptr_.reset(ptr);
  bytes_ = bytes;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult PinnedMemory::allocate(std::size_t bytes, const std::string& what) {
  ptr_.reset();
  bytes_ = 0;
  void* ptr = nullptr;
  const cudaError_t error = cudaMallocHost(&ptr, bytes == 0 ? 16 : bytes);
  if (error != cudaSuccess) {
    return cuda_ok(error, "cudaMallocHost(" + std::to_string(bytes) + " bytes) for " + what);
  }
  ptr_.reset(ptr);
  bytes_ = bytes;
  return ::testing::AssertionSuccess();
}

namespace {

void CUDART_CB fill_with_ff(void* memory) {
  const PinnedMemory* m = static_cast<const PinnedMemory*>(memory);
  std::memset(m->get(), 0xFF, m->bytes());
}

}  // namespace

::testing::AssertionResult PinnedMemory::poison(cudaStream_t stream, const std::string& what) const {
  if (get() == nullptr) return ::testing::AssertionSuccess();
  return cuda_ok(cudaLaunchHostFunc(stream, fill_with_ff, const_cast<PinnedMemory*>(this)), "poison " + what);
}

// ---- Shapes and groups ---------------------------------------------------------------------

Shape world_shape(int experts_per_rank, int hidden, int max_tokens, int max_topk) {
  Shape shape;
  shape.nranks = context().env.world_size;
  shape.num_experts = experts_per_rank * shape.nranks;
  shape.hidden = hidden;
  shape.max_tokens = max_tokens;
  shape.max_topk = max_topk;
  return shape;
}

std::vector<int> split_node_sizes() {
  std::vector<int> sizes;
  const int world = context().env.world_size;
  for (int n = 1; n < world; ++n) {
    if (world % n == 0) sizes.push_back(n);
  }
  return sizes;
}

EpcGroupConfig group_config(const Shape& shape, EpcMode mode, EpcDtype window) {
  EpcGroupConfig c = EPC_GROUP_CONFIG_INIT;
  c.mode = mode;
  c.num_experts = static_cast<uint32_t>(shape.num_experts);
  c.hidden = static_cast<uint32_t>(shape.hidden);
  c.max_tokens_per_rank = static_cast<uint32_t>(shape.max_tokens);
  c.max_topk = static_cast<uint32_t>(shape.max_topk);
  if (window == EPC_DTYPE_FP8_E4M3) c.max_token_bytes = c.hidden + c.hidden / 32;
  c.timeout_ms = test_timeout_ms();
  return c;
}

::testing::AssertionResult create_group(const Shape& shape, EpcMode mode, GroupPtr& out, EpcDtype window,
                                        uint32_t group_flags) {
  EpcGroupConfig c = group_config(shape, mode, window);
  c.flags = group_flags;
  EpcGroup* group = nullptr;
  ::testing::AssertionResult r =
      epc_ok(epc_group_create(context().comm, &c, &group),
             std::string("epc_group_create(") + (mode == EPC_MODE_LOW_LATENCY ? "LL" : "HT") +
                 ", E=" + std::to_string(shape.num_experts) + ", H=" + std::to_string(shape.hidden) +
                 ", T=" + std::to_string(shape.max_tokens) + ", max_topk=" + std::to_string(shape.max_topk) +
                 (window == EPC_DTYPE_FP8_E4M3 ? ", fp8-only window" : "") +
                 (group_flags != 0 ? ", flags " + std::to_string(group_flags) : "") + ")");
  if (!r) return r;
  out.reset(group);
  return ::testing::AssertionSuccess();
}

// ---- Handles ---------------------------------------------------------------------------------

EpcHandleConfig handle_config(EpcSizing sizing, uint32_t flags) {
  EpcHandleConfig c = EPC_HANDLE_CONFIG_INIT;
  c.sizing = sizing;
  c.flags = flags;
  return c;
}

::testing::AssertionResult create_handle_with(EpcGroup* group, const EpcHandleConfig& config, const EpcTensor* topk_idx,
                                              cudaStream_t stream, HandlePtr& out, const std::string& what) {
  EpcRouting routing = EPC_ROUTING_INIT;
  routing.topk_idx = topk_idx;
  EpcHandle* handle = nullptr;
  ::testing::AssertionResult r =
      epc_ok(epc_handle_create(group, &config, topk_idx == nullptr ? nullptr : &routing, stream, &handle), what);
  if (!r) return r;
  out.reset(handle);
  return ::testing::AssertionSuccess();
}

EpcStatus update_routing(EpcHandle* handle, const EpcTensor& topk_idx, cudaStream_t stream) {
  EpcRouting routing = EPC_ROUTING_INIT;
  routing.topk_idx = &topk_idx;
  return epc_handle_update(handle, &routing, stream);
}

::testing::AssertionResult query_handle(const EpcHandle* handle, EpcHandleInfo& out) {
  EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
  ::testing::AssertionResult r = epc_ok(epc_handle_query(handle, &info), "epc_handle_query");
  if (r) out = info;
  return r;
}

const char* sizing_name(EpcSizing sizing) { return sizing == EPC_SIZING_EXACT ? "EXACT" : "CAPACITY"; }

const char* dtype_name(EpcDtype dtype) {
  switch (dtype) {
    case EPC_DTYPE_BF16:
      return "bf16";
    case EPC_DTYPE_FP16:
      return "fp16";
    case EPC_DTYPE_FP32:
      return "fp32";
    default:
      return "another dtype";
  }
}

ref::ProblemGenOptions gen_options(const Shape& shape, int topk, uint64_t seed) {
  ref::ProblemGenOptions o;
  o.nranks = shape.nranks;
  o.num_experts = shape.num_experts;
  o.hidden = shape.hidden;
  o.topk = topk;
  o.max_tokens = shape.max_tokens;
  o.dtype = ref::Dtype::kBf16;
  o.seed = seed;
  return o;
}

// ---- Tensors and transfers ----------------------------------------------------------------

EpcTensor make_tensor(void* data, EpcDtype dtype, std::initializer_list<int64_t> shape) {
  EpcTensor t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  for (int d = 0; d < EPC_TENSOR_MAX_DIMS; ++d) {
    t.shape[d] = 0;
    t.strides[d] = 0;
  }
  int d = 0;
  for (int64_t extent : shape) t.shape[d++] = extent;
  return t;
}

::testing::AssertionResult upload_bytes(void* dst, const void* src, std::size_t bytes, cudaStream_t stream,
                                        const std::string& what) {
  if (bytes == 0) return ::testing::AssertionSuccess();
  return cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream),
                 "cudaMemcpyAsync (upload) of " + what);
}

::testing::AssertionResult download_bytes(void* dst, const void* src, std::size_t bytes, cudaStream_t stream,
                                          const std::string& what) {
  if (bytes == 0) return ::testing::AssertionSuccess();
  return cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream),
                 "cudaMemcpyAsync (download) of " + what);
}

::testing::AssertionResult upload_routing(void* dst, const std::vector<int64_t>& idx, EpcDtype dtype,
                                          std::vector<int32_t>& staging, cudaStream_t stream) {
  if (dtype == EPC_DTYPE_INT64) {
    return upload_bytes(dst, idx.data(), idx.size() * sizeof(int64_t), stream, "topk_idx");
  }
  staging.assign(idx.begin(), idx.end());
  return upload_bytes(dst, staging.data(), staging.size() * sizeof(int32_t), stream, "topk_idx (int32)");
}

::testing::AssertionResult download_and_wait(std::initializer_list<Download> downloads, cudaStream_t stream) {
  ::testing::AssertionResult r = ::testing::AssertionSuccess();
  for (const Download& d : downloads) {
    if (r) r = download_bytes(d.dst, d.src, d.bytes, stream, d.what);
  }
  const cudaError_t sync = cudaStreamSynchronize(stream);
  if (r) r = cuda_ok(sync, "cudaStreamSynchronize");
  return r;
}

::testing::AssertionResult poison(const DeviceMemory& memory, cudaStream_t stream, const std::string& what) {
  if (memory.get() == nullptr) return ::testing::AssertionSuccess();
  return cuda_ok(cudaMemsetAsync(memory.get(), 0xFF, memory.bytes(), stream), "poison " + what);
}

// ---- Deterministic values ------------------------------------------------------------------

uint16_t random_bf16(std::mt19937_64& engine) { return ref::float_to_bf16(unit_float(engine) * 4.0f - 2.0f); }

// ---- Bitwise comparison ---------------------------------------------------------------------

std::string hex_text(unsigned bits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%04x", bits);
  return buf;
}

std::string bf16_text(uint16_t bits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "0x%04x (%.9g)", static_cast<unsigned>(bits),
                static_cast<double>(ref::bf16_to_float(bits)));
  return buf;
}

std::string fp16_text(uint16_t bits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "0x%04x (%.9g)", static_cast<unsigned>(bits),
                static_cast<double>(ref::fp16_to_float(bits)));
  return buf;
}

std::string fp32_text(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  char buf[64];
  std::snprintf(buf, sizeof buf, "0x%08x (%.9g)", static_cast<unsigned>(bits), static_cast<double>(value));
  return buf;
}

std::string Mismatches::summary(const std::string& what) const {
  return what + ": " + std::to_string(count_) + " of " + std::to_string(compared_) +
         " compared elements differ; first at " + first_;
}

bool StepReport::fail(const std::string& message) {
  if (report_) ADD_FAILURE() << "[rank " << rank_ << ", " << label_ << "] " << message;
  ok_ = false;
  return false;
}

// ---- Collective helpers ---------------------------------------------------------------------

bool all_ranks_true(bool mine) {
  int* value = nullptr;
  cudaStream_t stream = nullptr;
  bool ok = cudaMalloc(&value, sizeof(int)) == cudaSuccess &&
            cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess;
  int host = mine ? 1 : 0;
  ok = ok && cudaMemcpyAsync(value, &host, sizeof host, cudaMemcpyHostToDevice, stream) == cudaSuccess;
  ok = ok && ncclAllReduce(value, value, 1, ncclInt32, ncclMin, static_cast<ncclComm_t>(context().comm), stream) ==
                 ncclSuccess;
  ok = ok && cudaMemcpyAsync(&host, value, sizeof host, cudaMemcpyDeviceToHost, stream) == cudaSuccess;
  ok = ok && cudaStreamSynchronize(stream) == cudaSuccess;
  if (stream != nullptr) cudaStreamDestroy(stream);
  if (value != nullptr) cudaFree(value);
  if (!ok) {
    ADD_FAILURE() << "all_ranks_true: the NCCL all-reduce on rank " << context().env.rank << " failed";
    return false;
  }
  return host == 1;
}

::testing::AssertionResult capture_on_every_rank(cudaStream_t stream,
                                                 const std::function<::testing::AssertionResult()>& body,
                                                 GraphExecPtr& exec) {
  exec.reset();
  std::string error;
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
  cudaGraph_t graph = nullptr;
  if (e != cudaSuccess) {
    error = cuda_ok(e, "cudaStreamBeginCapture").message();
  } else {
    const ::testing::AssertionResult r = body();
    if (!r) error = std::string("during capture: ") + r.message();
    // Always end the capture, even after a failed call, so the stream is usable again.
    e = cudaStreamEndCapture(stream, &graph);
    if (e != cudaSuccess && error.empty()) error = cuda_ok(e, "cudaStreamEndCapture").message();
  }
  if (error.empty()) {
    cudaGraphExec_t instantiated = nullptr;
    e = cudaGraphInstantiate(&instantiated, graph, 0);
    if (e != cudaSuccess) {
      error = cuda_ok(e, "cudaGraphInstantiate").message();
    } else {
      exec.reset(instantiated);
    }
  }
  if (graph != nullptr) cudaGraphDestroy(graph);  // the executable graph does not need it
  if (!error.empty()) cudaGetLastError();         // leave no stale error for epcomm to see
  const bool everyone_captured = all_ranks_true(error.empty());
  if (!error.empty()) return ::testing::AssertionFailure() << error;
  if (!everyone_captured) {
    exec.reset();
    return ::testing::AssertionFailure() << "the capture failed on another rank";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace epc::gputest
