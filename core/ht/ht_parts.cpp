// SPDX-License-Identifier: Apache-2.0
#include "core/ht/ht_parts.hpp"

#include <algorithm>

#include "core/env_count.hpp"

namespace epc {

namespace {

// EPCOMM_HT_PART_TOKENS unset: the budget chooses.
constexpr uint32_t kUnset = UINT32_MAX;

}  // namespace

uint32_t ht_part_tokens(const GroupConfig& c, const Topology& t,
                        const std::function<uint64_t(uint32_t)>& window_bytes) {
  const uint32_t T = c.max_tokens_per_rank;
  const bool parts = c.mode == EPC_MODE_HIGH_THROUGHPUT && t.nodes() > 1 &&
                     c.recv_capacity_for(t.nranks) == c.worst_case_recv(t.nranks);
  const uint32_t requested = env_count("EPCOMM_HT_PART_TOKENS", kUnset, static_cast<uint32_t>(kernels::kMaxHtTokens));
  if (!parts || requested == 0) return T;
  if (requested != kUnset) return std::min(T, requested);
  if (window_bytes(T) <= kHtWindowBudget) return T;
  // The window grows with the part: the largest number of granules that fits, by bisection.
  uint32_t fits = 0, past = (T + kHtPartGranule - 1) / kHtPartGranule;  // in granules
  while (past - fits > 1) {
    const uint32_t mid = fits + (past - fits) / 2;
    if (window_bytes(mid * kHtPartGranule) <= kHtWindowBudget) {
      fits = mid;
    } else {
      past = mid;
    }
  }
  return std::min(T, std::max<uint32_t>(fits, 1) * kHtPartGranule);
}

uint32_t ht_parts(const GroupConfig& c, uint32_t part_tokens) {
  return part_tokens == 0 ? 1 : (c.max_tokens_per_rank + part_tokens - 1) / part_tokens;
}

GroupConfig ht_part_config(const GroupConfig& c, uint32_t part_tokens) {
  if (part_tokens == 0 || part_tokens >= c.max_tokens_per_rank) return c;
  GroupConfig part = c;
  part.max_tokens_per_rank = part_tokens;
  part.recv_capacity = 0;  // the worst case of a part (ht_part_tokens runs parts only then)
  return part;
}

}  // namespace epc
