// SPDX-License-Identifier: Apache-2.0
// The ceiling: the simplest kernel that moves bytes to every NVLink peer at once. Each rank
// stores its bytes into every peer's window (ncclMemAlloc + ncclCommWindowRegister, peer
// pointers from ncclGetLsaPointer in the kernel), then signals every peer and waits for all
// of them, as one of our steps does. Measured twice:
//  - peak: a large copy to every peer, once per run: the NVLink egress bandwidth this run's
//    GPUs reach with plain stores ("wire over ceiling" divides by it);
//  - per point: exactly the bytes our dispatch and our combine send to each peer (rounded
//    up to 16 B), the time a perfect kernel with no layout work would need.
// It uses every SM (the ceiling is what the hardware can do, not what our SM budget allows),
// two blocks of 512 threads per SM; per point it can also run with one block of 1024 threads
// per SM of an SM budget (HT's default budget is 24 SMs: what a kernel limited like ours
// could reach).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/rank_session.hpp"
#include "bench/stats.hpp"
#include "bench/timing.hpp"
#include "bench/traffic.hpp"

namespace epc::bench {

class LsaCeiling {
 public:
  LsaCeiling() = default;
  ~LsaCeiling();
  LsaCeiling(const LsaCeiling&) = delete;
  LsaCeiling& operator=(const LsaCeiling&) = delete;

  // Collective. `slot_bytes`: the most one rank sends to one peer in any measurement.
  bool setup(RankSession& session, int64_t slot_bytes, int timeout_ms, std::string& error);
  // Collective. `bytes_per_peer` to every peer, timed `iters` times after `warmup`.
  bool measure_peak(int64_t bytes_per_peer, int warmup, int iters, Summary& out, std::string& error);
  // Collective. Appends "<who>.kernel.{dispatch,combine,step}": the copy with every SM
  // (`sms` = 0) or with one block per SM of a budget of `sms` SMs.
  bool measure_point(const RankTraffic& traffic, int warmup, int iters, const std::string& who, int sms,
                     MetricList& out, std::string& error);
  // The blocks of a budget of `sms` SMs: a multiple of the peer count, at least one per peer.
  int budget_blocks(int sms) const;
  int device_sms() const { return sms_; }
  // Collective.
  void teardown();

 private:
  bool launch(const std::vector<int64_t>& bytes_to, int blocks, int threads, std::string& error);
  bool failed(std::string& error);

  RankSession* s_ = nullptr;
  void* memory_ = nullptr;    // ncclMemAlloc
  void* window_ = nullptr;    // ncclWindow_t
  void* dev_comm_ = nullptr;  // ncclDevComm, heap-held so this header needs no NCCL device headers
  bool dev_comm_created_ = false;
  void* source_ = nullptr;    // local bytes to copy from
  uint32_t* done_ = nullptr;  // device: blocks finished in the current launch
  int* fail_host_ = nullptr;  // mapped: set when a wait timed out
  int* fail_device_ = nullptr;
  int64_t slot_bytes_ = 0;
  uint64_t epoch_ = 0;
  uint64_t timeout_ns_ = 0;
  int lsa_rank_ = 0, lsa_size_ = 0;
  int blocks_ = 0;
  int sms_ = 0;
};

}  // namespace epc::bench
