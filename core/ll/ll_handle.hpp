// SPDX-License-Identifier: Apache-2.0
// A low-latency handle: one batch's routing on one group, the device arrays that connect a
// dispatch to its combine, and a step split by EPC_FLAG_SEND_ONLY waiting for completion.
// Nothing here allocates or synchronises after construction, so steps can be captured in
// CUDA graphs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/device_memory.hpp"
#include "core/group.hpp"
#include "core/ll/ll_steps.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/ll_params.hpp"

namespace epc {

class LlHandle {
 public:
  LlHandle(Group& group, LlSteps& steps, const EpcTensor* topk_idx, cudaStream_t stream);
  ~LlHandle();
  LlHandle(const LlHandle&) = delete;
  LlHandle& operator=(const LlHandle&) = delete;

  void update(const EpcTensor* topk_idx, cudaStream_t stream);
  void dispatch(const EpcTensor* x, const EpcTensor* topk_weights, const EpcTensor* out_x, const EpcTensor* out_counts,
                EpcFlags flags, cudaStream_t stream);
  void dispatch_fp8(const EpcTensor* x, const EpcTensor* topk_weights, const EpcTensor* out_x,
                    const EpcTensor* out_scales, const EpcTensor* out_counts, EpcFlags flags, cudaStream_t stream);
  void combine(const EpcTensor* expert_out, const EpcTensor* out, EpcFlags flags, cudaStream_t stream);
  void complete(cudaStream_t stream);

  const Group& group() const { return group_; }

 private:
  enum class Pending { kNone, kDispatch, kCombine };

  // Checks what both dispatch flavours share and fills their kernel parameters.
  kernels::LlDispatchParams dispatch_params(const char* call, const EpcTensor* x, const EpcTensor* topk_weights,
                                            const EpcTensor* out_counts, EpcFlags flags, EpcFlags allowed_flags,
                                            bool fp8) const;
  void launch_dispatch(const kernels::LlDispatchParams& params, EpcFlags flags, cudaStream_t stream);
  void copy_routing(const EpcTensor* topk_idx, cudaStream_t stream);
  kernels::LlCommon common() const;
  // The SM budget, or `items` blocks when fewer suffice (one block per item).
  int blocks(int items = INT32_MAX) const;
  // Refuses a call while this handle (or, for a call that starts a step, any handle of the
  // group) has a send-only step waiting for epc_complete.
  void require_no_pending(const char* call, bool starts_step) const;

  Group& group_;
  LlSteps& steps_;
  int num_tokens_ = 0;
  int topk_ = 0;
  int max_entries_ = 0;
  DeviceAllocations memory_;        // the arrays below
  int32_t* topk_idx_ = nullptr;     // [T, K]
  int32_t* recv_tokens_ = nullptr;  // [R]
  int32_t* msg_entries_ = nullptr;  // [R, T]
  int32_t* msg_rows_ = nullptr;     // [R, T, max_entries]
  float* msg_weights_ = nullptr;    // [R, T, max_entries]

  Pending pending_ = Pending::kNone;
  kernels::LlDispatchParams pending_dispatch_{};
  kernels::LlCombineParams pending_combine_{};
};

}  // namespace epc
