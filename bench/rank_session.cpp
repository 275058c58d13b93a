// SPDX-License-Identifier: Apache-2.0
#include "bench/rank_session.hpp"

#include <nccl.h>

#include "epcomm/epcomm.h"

namespace epc::bench {

std::string epc_error(const char* what, int32_t status) {
  char message[2048] = {0};
  epc_last_error(message, sizeof message, nullptr);
  return std::string(what) + ": " + epc_status_string(status) + ": " + message;
}

std::string cuda_error(const char* what, cudaError_t status) {
  return std::string(what) + ": " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status);
}

RankSession::~RankSession() {
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (comm_ != nullptr) epc_comm_destroy(comm_);
}

bool RankSession::open(const harness::RankEnv& env, std::string& error) {
  rank_ = env.rank;
  nranks_ = env.world_size;
  device_ = env.device;
  cudaError_t c = cudaSetDevice(device_);
  if (c != cudaSuccess) {
    error = cuda_error("cudaSetDevice", c);
    return false;
  }
  EpcStatus s = epc_comm_init(&env.unique_id, nranks_, rank_, device_, &comm_);
  if (s != EPC_OK) {
    comm_ = nullptr;
    error = epc_error("epc_comm_init", s);
    return false;
  }
  c = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  if (c != cudaSuccess) {
    error = cuda_error("cudaStreamCreateWithFlags", c);
    return false;
  }
  return true;
}

bool RankSession::all_true(bool mine) {
  std::vector<uint8_t> all;
  std::string ignored;
  const int32_t value = mine ? 1 : 0;
  if (!allgather(&value, sizeof value, all, ignored)) return false;
  for (int r = 0; r < nranks_; ++r) {
    if (reinterpret_cast<const int32_t*>(all.data())[r] != 1) return false;
  }
  return true;
}

bool RankSession::allgather(const void* mine, size_t bytes, std::vector<uint8_t>& all, std::string& error) {
  const size_t total = bytes * static_cast<size_t>(nranks_);
  if (total > scratch_bytes_) {
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    cudaError_t c = cudaMalloc(&scratch_, total + bytes);
    if (c != cudaSuccess) {
      error = cuda_error("cudaMalloc for a host-side collective", c);
      return false;
    }
    scratch_bytes_ = total;
  }
  // The send buffer sits past the receive area, so NCCL sees two distinct buffers.
  char* recv = static_cast<char*>(scratch_);
  char* send = recv + scratch_bytes_;
  all.assign(total, 0);
  cudaError_t c = cudaMemcpyAsync(send, mine, bytes, cudaMemcpyHostToDevice, stream_);
  if (c != cudaSuccess) {
    error = cuda_error("cudaMemcpyAsync", c);
    return false;
  }
  ncclResult_t n = ncclAllGather(send, recv, bytes, ncclChar, static_cast<ncclComm_t>(comm_), stream_);
  if (n != ncclSuccess) {
    error = std::string("ncclAllGather: ") + ncclGetErrorString(n);
    return false;
  }
  c = cudaMemcpyAsync(all.data(), recv, total, cudaMemcpyDeviceToHost, stream_);
  if (c == cudaSuccess) c = cudaStreamSynchronize(stream_);
  if (c != cudaSuccess) {
    error = cuda_error("waiting for a host-side collective", c);
    return false;
  }
  return true;
}

}  // namespace epc::bench
