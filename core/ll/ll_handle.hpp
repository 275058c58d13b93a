// SPDX-License-Identifier: Apache-2.0
// A low-latency handle: one batch's routing on one group, the device arrays that connect a
// dispatch to its combine, and a step split by EPC_STEP_SEND_ONLY waiting for completion.
// Nothing here allocates or synchronises after construction, so steps can be captured in
// CUDA graphs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/count_outputs.hpp"
#include "core/device_memory.hpp"
#include "core/group.hpp"
#include "core/handle_name.hpp"
#include "core/ll/ll_outputs.hpp"
#include "core/ll/ll_steps.hpp"
#include "core/step_args.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/ll_params.hpp"

namespace epc {

class LlHandle {
 public:
  // `id` names the handle in messages (the caller's EpcHandle*); `topk_idx` may be null (no
  // routing yet). Allocates; local.
  LlHandle(Group& group, LlSteps& steps, const HandleSetup& setup, HandleName id, const EpcTensor* topk_idx,
           cudaStream_t stream);
  ~LlHandle();
  LlHandle(const LlHandle&) = delete;
  LlHandle& operator=(const LlHandle&) = delete;

  void update(const EpcTensor* topk_idx, cudaStream_t stream);
  void dispatch(const EpcDispatchArgs& args, cudaStream_t stream);
  void combine(const EpcCombineArgs& args, cudaStream_t stream);
  void complete(cudaStream_t stream);
  EpcHandleInfo info() const;

 private:
  // Refuses a step (or an update) while this handle has a send-only call waiting for
  // epc_complete, and a step before any routing. (LlSteps::take checks the group's limits.)
  void require_ready(const char* call, bool starts_step) const;
  void copy_routing(const EpcTensor* topk_idx, cudaStream_t stream);
  // The handle's shapes for the checks of core/ll/ll_outputs.hpp.
  LlShape shape() const;
  kernels::LlCommon common() const;
  // The SM budget's blocks (`per_sm` on each SM: kernels::ll_alone_blocks_per_sm), or
  // `items` blocks when fewer suffice (one block per item).
  int blocks(int items = INT32_MAX, int per_sm = 1) const;
  // Blocks for the parts that walk received messages (dispatch receive, combine send), and
  // how many of them share one message.
  int message_blocks(int per_sm = 1) const;
  int message_slices(int per_sm = 1) const;
  // Blocks for the dispatch's sending part: one per (token, slice of its row).
  int token_blocks(int per_sm = 1) const;
  // Blocks sharing one row when `items` rows are spread over the SM budget's blocks.
  int slices_for(int items, int per_sm = 1) const;
  // A launch's blocks within a call's send_sms budget (resolve_send_sms): every loop strides
  // over its grid, so any count gives the same outputs.
  static int capped(int blocks, int budget);

  Group& group_;
  LlSteps& steps_;
  HandleSetup setup_;
  HandleName id_;
  int num_tokens_ = 0;
  int topk_ = 0;  // 0 until the first routing
  int max_entries_ = 0;
  DeviceAllocations memory_;            // the arrays below
  int32_t* topk_idx_ = nullptr;         // [T, max_topk]
  int32_t* recv_tokens_ = nullptr;      // [2R]: messages from each source, then its tokens
  int32_t* msg_slot_ = nullptr;         // [R * T]
  int32_t* msg_entries_ = nullptr;      // [R, T]
  int32_t* msg_rows_ = nullptr;         // [R, T, max_entries]
  float* msg_weights_ = nullptr;        // [R, T, max_entries]
  int32_t* counts_ = nullptr;           // [L]: per-expert counts when the caller asks for none
  int32_t* expert_entries_ = nullptr;   // [num_experts]: the routing's entries per expert
  int32_t* entry_positions_ = nullptr;  // [T, K]: each entry's position among its expert's entries
  int32_t* token_places_ = nullptr;     // [T, R]: each token's place on every rank
  int32_t* rank_tokens_ = nullptr;      // [R]: the routing's tokens with an entry on each rank
  uint64_t* steps_record_ = nullptr;    // [kLlStepRecords]: written by the sending launches

  uint32_t pending_ = EPC_PENDING_NONE;
  int pending_slot_ = -1;  // the slot the pending step holds (LlSteps)
  // A dispatch was queued since the last routing: a combine walks what it received.
  bool dispatched_ = false;
  // The last dispatch had no topk_weights: its rows' weights are 0, so an EPC_WEIGHTING_SENDER
  // combine of it is refused (EPC_WEIGHTING_HOME weights at combine instead).
  bool dispatched_unweighted_ = false;
  kernels::LlDispatchParams pending_dispatch_{};
  kernels::LlCombineParams pending_combine_{};
  CountOutputs pending_counts_{};
};

}  // namespace epc
