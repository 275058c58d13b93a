// SPDX-License-Identifier: Apache-2.0
// What a low-latency step's tensors must look like in the handle's layout (EXPERT_PADDED,
// RANK_MAJOR or FLAT), checked before any GPU work: out_x and combine's x, the scales,
// the received top-k ids and weights and the counts each layout has a column for
// (epcomm.h's EpcLayout table), and the combine weighting. Pure CPU, so the unit tests
// check every refusal without a GPU.
#pragma once

#include <cstdint>

#include "core/passthrough.hpp"
#include "core/step_args.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/scale_output.hpp"

namespace epc {

// The extents the checks need: R, T, H, L, and the routing's B and K.
struct LlShape {
  int64_t ranks = 0;
  int64_t max_tokens = 0;
  int64_t hidden = 0;
  int64_t local_experts = 0;
  int64_t tokens = 0;
  int64_t topk = 0;
};

// The outputs a dispatch writes beside out_x and the per-expert counts, null where not
// asked for; `scales` with EPC_QUANT_FP8 and EPC_QUANT_PASSTHROUGH.
struct LlOutputs {
  kernels::ScaleOutput scales{};
  int32_t* topk_idx = nullptr;
  float* topk_weights = nullptr;
  int32_t* rank_counts = nullptr;
  int32_t* num_recv = nullptr;
};

// `tensor` (named `field`) of `dtype` in out_x's shape: [L, C, H] (EXPERT_PADDED), [R, T, H]
// (RANK_MAJOR) or [R * T, H] (FLAT). Throws INVALID_ARGUMENT otherwise.
void check_ll_rows_tensor(const EpcTensor* tensor, const char* field, EpcDtype dtype, const HandleSetup& setup,
                          const LlShape& shape);

// Dispatch's layout-dependent fields (x, quant and the count outputs are checked by the
// caller): topk_weights (required by EXPERT_PADDED and by out_topk_weights), out_x, out_scales,
// and the outputs the layout has a column for. An output it has none for is
// INVALID_ARGUMENT; EXPERT_PADDED's out_topk_weights is UNSUPPORTED (defined, not served).
// `passthrough` (EPC_QUANT_PASSTHROUGH, else null): out_x of x's dtype with the payload's
// columns, out_scales of x_scales' dtype with its S elements per row, any strides.
LlOutputs check_ll_dispatch_outputs(const EpcDispatchArgs& args, const HandleSetup& setup, const LlShape& shape,
                                    const PassthroughPayload* passthrough = nullptr);

// EPC_QUANT_PASSTHROUGH: a message holds the group's max token bytes behind its header
// (core/planner.cpp), `max_token_bytes` (GroupConfig::max_token_bytes()). A row and its
// scales beyond it are INVALID_ARGUMENT naming EpcDispatchArgs.x_scales and the limit.
void check_ll_passthrough_fits(const PassthroughPayload& payload, uint32_t max_token_bytes);

// The weighting a combine runs on a handle of `layout` in a group of `group_flags`
// (EpcGroupConfig.flags) after its default: EXPERT_PADDED weights on the expert's rank (SENDER,
// the default) or on the token's (HOME: INVALID_ARGUMENT, naming EpcGroupConfig.flags too, on a
// group without EPC_GROUP_COMBINE_PER_ENTRY, whose window has no per-entry rows; NONE is
// UNSUPPORTED); RANK_MAJOR and FLAT sum the rows as given (NONE; SENDER and HOME are
// INVALID_ARGUMENT).
EpcWeighting resolve_ll_weighting(EpcWeighting weighting, EpcLayout layout, uint32_t group_flags);

}  // namespace epc
