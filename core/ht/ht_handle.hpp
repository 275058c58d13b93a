// SPDX-License-Identifier: Apache-2.0
// A high-throughput handle: one batch's routing on one group and its layout (which rank
// receives which token, at which row, and how many rows each rank receives), computed once
// on the GPU and exchanged between ranks when the handle is created (or updated), then
// reused by every dispatch and combine on it, forward and backward; and a step split by
// EPC_STEP_SEND_ONLY waiting for epc_complete.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/count_outputs.hpp"
#include "core/device_memory.hpp"
#include "core/group.hpp"
#include "core/handle_name.hpp"
#include "core/ht/ht_overflow.hpp"
#include "core/ht/ht_steps.hpp"
#include "core/step_args.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/ht_params.hpp"

namespace epc {

class HtHandle {
 public:
  // `id` names the handle in messages (the caller's EpcHandle*). With routing: collective,
  // and with EPC_SIZING_EXACT waits for the count exchange (one host sync). Without
  // routing (`topk_idx` null): local, allocation only.
  HtHandle(Group& group, HtSteps& steps, const HandleSetup& setup, HandleName id, const EpcTensor* topk_idx,
           cudaStream_t stream);
  // A send-only step still pending is ended on this rank (abandon_pending).
  ~HtHandle();
  HtHandle(const HtHandle&) = delete;
  HtHandle& operator=(const HtHandle&) = delete;

  void update(const EpcTensor* topk_idx, cudaStream_t stream);
  void dispatch(const EpcDispatchArgs& args, cudaStream_t stream);
  void combine(const EpcCombineArgs& args, cudaStream_t stream);
  // The receiving half of the pending send-only step, on the group's num_sms.
  void complete(cudaStream_t stream);
  EpcHandleInfo info() const;

 private:
  // Copies the routing and queues the layout kernel (count exchange included); with EXACT
  // sizing waits for it and takes the received row count. When the layout fails after the
  // routing's copy, the handle is left without a routing.
  void compute_layout(const EpcTensor* topk_idx, int topk, cudaStream_t stream);
  // compute_layout's layout of the copied routing of `tokens` tokens.
  void lay_out(int tokens, cudaStream_t stream);
  void require_routed(const char* call) const;
  // Refuses a call while this handle has a send-only step pending; for a step (`dispatch`:
  // of that operation, else of combine) also while another handle of the group has one of
  // the same operation pending, a `send_only` step while the other operation has one
  // pending and max_pending_steps is 1, and a step before any routing.
  void require_ready(const char* call, bool starts_step, bool dispatch, bool send_only) const;
  // Once the device has run the pending step's sending launch, ends the step on this rank
  // as its receiving launch would, reading nothing (kernels/launch.hpp). Best effort: a
  // failed group or a CUDA error leaves the group to its sticky failure.
  void abandon_pending() noexcept;
  bool packed() const { return setup_.layout == EPC_LAYOUT_EXPERT_PACKED; }
  // The rows this rank keeps of a step (kernels/wire/ht_capacity.hpp): FLAT with CAPACITY
  // sizing, its capacity; else the tokens the group's window holds.
  int64_t row_limit() const;
  // One part of the handle's steps (core/ht/ht_parts.hpp; one where steps run whole): its
  // tokens, and its layout, rows numbered from 0 by its layout kernel and then placed behind
  // the parts before it (kernels::launch_ht_parts_layout).
  struct Part {
    kernels::HtHandleArrays arrays{};
    int token_begin = 0;
    int num_tokens = 0;
  };
  kernels::HtCommon common(const Part& part) const;
  // Allocates every part's layout arrays, each array of every part in one allocation.
  void allocate_parts(cudaStream_t stream);
  // `count` elements of `member` for every part, in one allocation (part k's at k * count),
  // zeroed or not.
  template <typename T>
  void spread(size_t count, T* kernels::HtHandleArrays::* member, bool zeroed, cudaStream_t stream);
  // Throws EPC_ERR_UNSUPPORTED for a handle whose steps cannot run in `parts` parts.
  void check_parts_served(uint32_t parts) const;
  // The window areas of one direction: its slots, and its signal region (flags, then acks).
  kernels::HtChannel channel(EpcRegionKind data, EpcRegionKind signal) const;

  Group& group_;
  HtSteps& steps_;
  HandleSetup setup_;
  HandleName id_;
  int topk_ = 0;  // 0 until the first routing
  int num_tokens_ = 0;
  int64_t rows_ = 0;
  // EXPERT_PACKED: the arrays of HtHandleArrays' packed part and the entry sort's scratch.
  void allocate_packed(cudaStream_t stream);
  // Across nodes combine needs the record dispatch's forwarders keep (HtHandleArrays), and
  // EXPERT_PACKED combine the rows dispatch gave each entry.
  bool dispatched_ = false;
  bool dispatched_weights_ = false;  // EXPERT_PACKED: the last dispatch had topk_weights
  kernels::HtEntryOrder order_{};
  // Declared before memory_, so freed after it: memory_'s destructor waits for the device,
  // whose layout kernels write the report.
  std::unique_ptr<HtOverflowReport> overflow_;
  // Sizing other than CAPACITY: the received row count is copied here, page-locked, so that
  // the copy is asynchronous and the one host wait is the stream synchronisation (a copy into
  // pageable memory waits for the stream inside the copy).
  PinnedHost<int32_t> received_host_;
  DeviceAllocations memory_;  // every array of every part
  GroupConfig part_config_;   // the group's, with a part's tokens (ht_part_config)
  std::vector<Part> parts_;

  // The send-only step waiting for epc_complete: its parameters, as the receiving launch
  // takes them, and what dispatch does after it.
  uint32_t pending_ = EPC_PENDING_NONE;
  kernels::HtDispatchParams pending_dispatch_{};
  kernels::HtCombineParams pending_combine_{};
  CountOutputs pending_counts_{};
  bool pending_weights_ = false;  // the pending dispatch had topk_weights
};

}  // namespace epc
