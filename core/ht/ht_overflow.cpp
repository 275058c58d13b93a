// SPDX-License-Identifier: Apache-2.0
#include "core/ht/ht_overflow.hpp"

#include <cuda_runtime.h>

#include <atomic>

#include "core/error.hpp"
#include "core/gpu_check.hpp"

namespace epc {

HtOverflowReport::HtOverflowReport() {
  host_ =
      allocate_pinned<kernels::HtOverflowRecord>(cudaHostAllocMapped, "cudaHostAlloc of the handle's overflow record");
  check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_.get(), 0),
             "cudaHostGetDevicePointer of the handle's overflow record");
}

bool HtOverflowReport::seen(uint64_t sequence, int32_t* rank, int32_t* rows) const {
  if (sequence == 0) return false;
  const volatile kernels::HtOverflowRecord* r = host_.get();
  if (r->sequence != sequence) return false;
  std::atomic_thread_fence(std::memory_order_acquire);  // the layout writes the sequence last
  *rank = r->rank;
  *rows = r->rows;
  std::atomic_thread_fence(std::memory_order_acquire);
  return r->sequence == sequence;  // not overwritten meanwhile by a later layout
}

void HtOverflowReport::check(const char* call, bool fail_policy, const HandleName& handle) const {
  int32_t rank = -1, rows = 0;
  if (!fail_policy || dispatched_ != routing_ || !seen(dispatched_, &rank, &rows) || rank < 0) return;
  fail(EPC_ERR_CAPACITY,
       format("%s: the last dispatch on %s overflowed: rank %d received %d rows more than its capacity "
              "(EPC_OVERFLOW_FAIL), so that step did nothing on any rank; raise EpcGroupConfig.recv_capacity or "
              "EpcHandleConfig.capacity, or use EPC_OVERFLOW_DROP; the next epc_handle_update starts afresh",
              call, handle.text().c_str(), rank, rows));
}

void HtOverflowReport::fill(EpcHandleInfo& info) const {
  int32_t rank = -1, rows = 0;
  if (!seen(dispatched_, &rank, &rows) || rank < 0) return;
  info.overflow_status = EPC_ERR_CAPACITY;
  info.overflow_rank = rank;
  info.overflow_rows = rows;
}

}  // namespace epc
