// SPDX-License-Identifier: Apache-2.0
// A high-throughput handle: one batch's routing on one group and its layout (which rank
// receives which token, at which row, and how many rows each rank receives), computed once
// on the GPU and exchanged between ranks when the handle is created (or updated), then
// reused by every dispatch and combine on it, forward and backward.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/device_memory.hpp"
#include "core/group.hpp"
#include "core/ht/ht_steps.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/ht_params.hpp"

namespace epc {

class HtHandle {
 public:
  // Collective. With EPC_HT_SIZING_EXACT waits for the count exchange (one host sync).
  HtHandle(Group& group, HtSteps& steps, const EpcTensor* topk_idx, EpcHtSizing sizing, cudaStream_t stream);
  HtHandle(const HtHandle&) = delete;
  HtHandle& operator=(const HtHandle&) = delete;

  // Rows of every [rows, ...] tensor the handle's calls take.
  int64_t rows() const { return rows_; }

  void update(const EpcTensor* topk_idx, cudaStream_t stream);
  void dispatch(const EpcTensor* x, const EpcTensor* x_scales, const EpcTensor* topk_weights, const EpcTensor* out_x,
                const EpcTensor* out_scales, const EpcTensor* out_topk_idx, const EpcTensor* out_topk_weights,
                const EpcTensor* out_expert_counts, const EpcTensor* out_num_recv, EpcFlags flags, cudaStream_t stream);
  void combine(const EpcTensor* x, const EpcTensor* topk_weights, const EpcTensor* out,
               const EpcTensor* out_topk_weights, EpcFlags flags, cudaStream_t stream);

 private:
  // Copies the routing and queues the layout kernel (count exchange included).
  void compute_layout(const EpcTensor* topk_idx, cudaStream_t stream);
  kernels::HtCommon common() const;
  // The window areas of one direction: its slots, and its signal region (flags, then acks).
  kernels::HtChannel channel(EpcRegionKind data, EpcRegionKind signal) const;

  Group& group_;
  HtSteps& steps_;
  EpcHtSizing sizing_;
  int topk_ = 0;
  int num_tokens_ = 0;
  int64_t rows_ = 0;
  // Across nodes combine needs the record dispatch's forwarders keep (HtHandleArrays).
  bool dispatched_ = false;
  DeviceAllocations memory_;  // every array of arrays_
  kernels::HtHandleArrays arrays_{};
};

}  // namespace epc
