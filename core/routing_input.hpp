// SPDX-License-Identifier: Apache-2.0
// How a handle takes in the caller's routing: the checks every mode applies to `topk_idx`
// and the device copy that turns it into validated int32 (kernels/common/routing_copy.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/gpu_check.hpp"
#include "core/group.hpp"
#include "epcomm/epcomm.h"

namespace epc {

// What an LL handle keeps of its routing besides the ids (kernels/common/routing_copy.cu):
// the entries per expert ([num_experts]) and each entry's position among its expert's
// entries in (token, slot) order ([max_tokens, topk]), each token's place on every rank
// ([max_tokens, nranks]) and the tokens with an entry on each rank ([nranks]): all or none.
struct ExpertRouting {
  int32_t* entries = nullptr;
  int32_t* positions = nullptr;
  int32_t* token_places = nullptr;
  int32_t* rank_tokens = nullptr;
};

// Checks `topk_idx` ([B, topk] int64 or int32, B <= max_tokens_per_rank) and queues its copy
// into `out` ([max_tokens, topk] int32) on `stream`, with `expert`'s arrays when given.
// Returns B.
int copy_routing(const Group& group, const EpcTensor* topk_idx, int topk, int32_t* out, cudaStream_t stream,
                 const ExpertRouting& expert = {});

// The K of a routing tensor, checked against the group's max_topk and, when `fixed_topk` is
// not 0 (a handle's K after its first routing), against that.
int routing_topk(const Group& group, const EpcTensor* topk_idx, int fixed_topk = 0);

}  // namespace epc
