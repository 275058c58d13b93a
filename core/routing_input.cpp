// SPDX-License-Identifier: Apache-2.0
#include "core/routing_input.hpp"

#include "core/device_guard.hpp"
#include "core/error.hpp"
#include "core/tensor_check.hpp"
#include "kernels/launch.hpp"

namespace epc {

int routing_topk(const Group& group, const EpcTensor* topk_idx, int fixed_topk) {
  const GroupConfig& c = group.config();
  if (topk_idx == nullptr) fail_argument("tensor topk_idx is NULL");
  if (topk_idx->ndim != 2) {
    fail_argument(format("tensor topk_idx has %d dimensions; expected 2 ([B, K])", topk_idx->ndim));
  }
  const int64_t topk = topk_idx->shape[1];
  if (topk < 1 || topk > static_cast<int64_t>(c.max_topk)) {
    fail_argument(format("tensor topk_idx has K = %lld; it must be in [1, max_topk = %u]", static_cast<long long>(topk),
                         c.max_topk));
  }
  if (fixed_topk != 0 && topk != fixed_topk) {
    fail_argument(
        format("EpcRouting.topk_idx has K = %lld; this handle's routing has K = %d, which stays fixed after "
               "the first routing (create another handle for another K)",
               static_cast<long long>(topk), fixed_topk));
  }
  return static_cast<int>(topk);
}

int copy_routing(const Group& group, const EpcTensor* topk_idx, int topk, int32_t* out, cudaStream_t stream,
                 const ExpertRouting& expert) {
  const GroupConfig& c = group.config();
  check_tensor(topk_idx, {"topk_idx", {EPC_DTYPE_INT64, EPC_DTYPE_INT32}, {kAnyExtent, topk}, 4});
  const int64_t tokens = topk_idx->shape[0];
  if (tokens > static_cast<int64_t>(c.max_tokens_per_rank)) {
    fail_argument(
        format("tensor topk_idx has B = %lld tokens; the group holds at most "
               "max_tokens_per_rank = %u",
               static_cast<long long>(tokens), c.max_tokens_per_rank));
  }
  kernels::RoutingCopyParams p{};
  p.topk_idx = topk_idx->data;
  p.index_bytes = static_cast<int>(dtype_size(topk_idx->dtype));
  p.count = static_cast<int>(tokens) * topk;
  p.num_experts = static_cast<int>(c.num_experts);
  p.rank = group.rank();
  p.out = out;
  p.expert_entries = expert.entries;
  p.entry_positions = expert.positions;
  p.token_places = expert.token_places;
  p.rank_tokens = expert.rank_tokens;
  p.ranks = group.topology().nranks;
  p.local_experts = static_cast<int>(c.local_experts(group.topology().nranks));
  p.topk = topk;
  p.error = group.device_error();
  DeviceGuard guard(group.device());
  check_cuda(kernels::launch_routing_copy(p, stream), "launching the routing copy");
  return static_cast<int>(tokens);
}

}  // namespace epc
