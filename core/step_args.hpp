// SPDX-License-Identifier: Apache-2.0
// The ABI's handle configuration, routing and step arguments after the struct rules and
// defaults, and the checks every mode applies to them; each mode's handle checks the rest
// (core/ll/ll_handle.cpp, core/ht/ht_handle.cpp).
#pragma once

#include <cstdint>

#include "core/config.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/sum_output.hpp"

namespace epc {

// The EPC_LAYOUT_* name of `layout`, for messages.
const char* layout_name(EpcLayout layout);

// What a handle's receive side looks like (EpcHandleConfig after defaults).
struct HandleSetup {
  EpcLayout layout = EPC_LAYOUT_DEFAULT;
  EpcSizing sizing = EPC_SIZING_CAPACITY;
  uint64_t capacity = 0;
  uint32_t flags = 0;
  uint32_t expert_alignment = 1;  // after defaults; EXPERT_PACKED only
};

// Applies defaults and throws for what the group's mode cannot serve (UNSUPPORTED) or what
// is meaningless (INVALID_ARGUMENT), naming the field. `config` may be NULL.
HandleSetup resolve_handle_config(const EpcHandleConfig* config, const GroupConfig& group, int nranks);

// The most rows `entries` received (token, entry) pairs can take over `zones` expert zones
// whose starts and sizes are multiples of `alignment` (0 means 1): EXPERT_PACKED's default
// capacity (tests/reference/reference_ht_packed.hpp states the same bound).
uint64_t ht_packed_worst_rows(uint64_t entries, uint64_t zones, uint64_t alignment);

// What epc_handle_query reports for a handle of `mode` set up as `setup`, with its current
// routing (B, K; 0 before the first), pending call (EPC_PENDING_*) and rows.
EpcHandleInfo handle_info(EpcMode mode, const HandleSetup& setup, uint64_t id, int num_tokens, int topk,
                          uint32_t pending, int64_t rows);

// The routing tensor an EpcRouting carries; throws for a NULL struct or field, and for the
// fields not served yet.
const EpcTensor* routing_tensor(const EpcRouting* routing);

// Copies the caller's args (NULL: INVALID_ARGUMENT, x and out_x are required) and checks
// the fields whose meaning does not depend on the mode: flag bits, enum values, pairs.
EpcDispatchArgs read_dispatch_args(const EpcDispatchArgs* args);
EpcCombineArgs read_combine_args(const EpcCombineArgs* args);

// The weighting an HT combine runs on a handle of `layout` in a group of `group_flags`
// (EpcGroupConfig.flags) after its default: NONE (FLAT: the rows as given), SENDER or HOME
// (EXPERT_PACKED). Throws INVALID_ARGUMENT, naming EpcCombineArgs.weighting, for SENDER or
// HOME on FLAT and for HOME on a group without EPC_GROUP_COMBINE_PER_ENTRY (its combine
// window has no per-entry slots; the message names EpcGroupConfig.flags too).
EpcWeighting resolve_ht_weighting(EpcWeighting weighting, EpcLayout layout, uint32_t group_flags);
// The weighting of an expert layout (HT EXPERT_PACKED, LL EXPERT_PADDED) once the layout's own
// refusals are made: DEFAULT is SENDER; HOME needs a group with EPC_GROUP_COMBINE_PER_ENTRY
// (else INVALID_ARGUMENT naming the flag).
EpcWeighting resolve_expert_weighting(EpcWeighting weighting, uint32_t group_flags);

// A step's SM budget for its sending launch (EpcDispatchArgs or EpcCombineArgs .send_sms,
// named `field`) after its default, 0: the group's num_sms. Throws INVALID_ARGUMENT when it
// exceeds num_sms or `device_sms`, the GPU's SM count.
int resolve_send_sms(uint32_t send_sms, uint32_t num_sms, int device_sms, const char* field);

// A dispatch's EpcDispatchArgs.max_step_tokens after its default, 0: max_tokens_per_rank.
// Throws INVALID_ARGUMENT when it exceeds max_tokens_per_rank or is below `tokens`, this rank's
// B. That every rank passes the same value no rank can check: the kernels' signals tell.
int resolve_max_step_tokens(uint32_t max_step_tokens, int64_t tokens, uint32_t max_tokens_per_rank);

// EPC_STEP_SEND_ONLY (in `field`) on a high-throughput group of `nodes` nodes, virtual ones
// included: throws UNSUPPORTED for more than one, where the fused launch is required.
void require_ht_split_served(int nodes, const char* field);

// Throws INVALID_ARGUMENT when `tensor` is given: `field` has no meaning here (`why`).
void require_absent(const EpcTensor* tensor, const char* field, const char* why);
// Throws UNSUPPORTED when `tensor` is given: `field` is defined but not served yet.
void require_unserved(const EpcTensor* tensor, const char* field, const char* what);

// The store type of a combine output of `dtype` (bf16, fp16 or fp32).
kernels::SumOutput sum_output_of(EpcDtype dtype);

}  // namespace epc
