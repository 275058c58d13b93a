// SPDX-License-Identifier: Apache-2.0
// One rank's process-wide resources: its GPU, the NCCL communicator (created through
// epcomm's bootstrap, shared by our groups, the baseline and the ceiling), one stream, and
// the few host-side collectives the benchmark needs to agree and to gather figures.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/harness/harness.hpp"

namespace epc::bench {

class RankSession {
 public:
  RankSession() = default;
  ~RankSession();
  RankSession(const RankSession&) = delete;
  RankSession& operator=(const RankSession&) = delete;

  // Collective: every rank must call it. Returns false with `error` set.
  bool open(const harness::RankEnv& env, std::string& error);

  // Collective: true when every rank passed true. A failed NCCL call counts as false.
  bool all_true(bool mine);

  // Collective: every rank's `bytes` bytes, rank-major, into `all`.
  bool allgather(const void* mine, size_t bytes, std::vector<uint8_t>& all, std::string& error);

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int device() const { return device_; }
  void* comm() const { return comm_; }  // an ncclComm_t
  cudaStream_t stream() const { return stream_; }

 private:
  int rank_ = 0;
  int nranks_ = 0;
  int device_ = 0;
  void* comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;  // device buffer for the host-side collectives
  size_t scratch_bytes_ = 0;
};

// "what: <epcomm status>: <message>" for the calling thread's last epcomm error.
std::string epc_error(const char* what, int32_t status);
// "what: <cuda error name>: <text>".
std::string cuda_error(const char* what, cudaError_t status);

}  // namespace epc::bench
