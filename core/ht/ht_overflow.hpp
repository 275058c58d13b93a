// SPDX-License-Identifier: Apache-2.0
// The host's side of a high-throughput handle's overflow report (kernels/wire/ht_capacity.hpp):
// every layout writes what it found into mapped host memory, tagged with its routing's
// number; steps and epc_handle_query read it without a CUDA call, so they see it once the
// GPU has run the layout. The device stops an overflowing step under EPC_OVERFLOW_FAIL on
// every rank by itself: what one host reports never decides what the ranks run.
#pragma once

#include <cstdint>
#include <memory>

#include "core/device_memory.hpp"
#include "core/handle_name.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/ht_capacity.hpp"

namespace epc {

class HtOverflowReport {
 public:
  // Allocates the record; the handle's device must be current.
  HtOverflowReport();

  // Where the layout kernel writes.
  kernels::HtOverflowRecord* device_record() const { return device_; }
  // A new routing: returns its number, which its layout writes into the record.
  uint64_t next_routing() { return ++routing_; }
  // A dispatch was queued for the current routing.
  void dispatched() { dispatched_ = routing_; }
  // Throws EPC_ERR_CAPACITY, naming the rank and the rows, when the last dispatch was of the
  // current routing, its layout overflowed and `fail_policy` (EPC_OVERFLOW_FAIL) holds.
  void check(const char* call, bool fail_policy, const HandleName& handle) const;
  // The overflow fields of epc_handle_query: the last dispatch's, once its layout has run.
  void fill(EpcHandleInfo& info) const;

 private:
  // The record of routing `sequence` (0: none), when the GPU has written it.
  bool seen(uint64_t sequence, int32_t* rank, int32_t* rows) const;

  PinnedHost<kernels::HtOverflowRecord> host_;
  kernels::HtOverflowRecord* device_ = nullptr;
  uint64_t routing_ = 0;
  uint64_t dispatched_ = 0;  // the routing of the last dispatch, 0 for none
};

}  // namespace epc
