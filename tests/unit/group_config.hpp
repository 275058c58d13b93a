// SPDX-License-Identifier: Apache-2.0
// A resolved group configuration for the planner's tests: the ABI struct with the fields
// the tests vary, through the same rules epc_plan_query applies.
#pragma once

#include <cstdint>

#include "core/config.hpp"
#include "epcomm/epcomm.h"

namespace epc::test {

inline GroupConfig group_config(EpcMode mode, uint32_t experts, uint32_t hidden, uint32_t tokens, uint32_t topk) {
  EpcGroupConfig raw = EPC_GROUP_CONFIG_INIT;
  raw.mode = mode;
  raw.num_experts = experts;
  raw.hidden = hidden;
  raw.max_tokens_per_rank = tokens;
  raw.max_topk = topk;
  return resolve_config(&raw);
}

}  // namespace epc::test
