// SPDX-License-Identifier: Apache-2.0
// High-throughput steps across nodes in parts (issue 27): a group of several nodes runs each
// dispatch and combine as consecutive steps over at most P tokens per rank (the part), so its
// window holds the slots of P tokens per source instead of max_tokens_per_rank: it grows with
// the rank count and not with the token count. Every part is an ordinary step of the kernels
// on a layout of its own (core/ht/ht_handle.hpp runs one layout per part, then
// kernels/ht/ht_parts.cu moves each part's rows behind those of the parts before it), so the
// outputs are the whole step's, bit for bit, and each part's deadlock freedom is the step's.
//
// Where the whole step's window fits kHtWindowBudget, steps run whole; else P is the largest
// multiple of kHtPartGranule tokens whose window fits it (at least one granule), so the window
// stays under the budget whatever max_tokens_per_rank, and a step takes as few parts as the
// budget allows (each part costs a step's fixed latency: docs/tuning.md). Where the
// environment sets EPCOMM_HT_PART_TOKENS (1 to kMaxHtTokens; 0 for whole steps; a testing
// and tuning aid, read by the planner at epc_group_create and epc_plan_query), P is that.
// Groups of one node, and groups with their own recv_capacity below the worst case (a compact
// window already sized by the caller), run whole steps.
#pragma once

#include <cstdint>
#include <functional>

#include "core/config.hpp"
#include "core/topology.hpp"

namespace epc {

// The window a group of several nodes plans at most, where parts can keep it there: under
// issue 27's 700 MiB per rank at 16 ranks and 1.2 GiB at 64 (hidden 7168, top-8;
// docs/design.md), and as large as the 16-rank bound leaves room for, since every part
// costs a step's latency: parts of 1376 tokens there, three at 4096.
constexpr uint64_t kHtWindowBudget = uint64_t{688} << 20;
// Parts are a whole number of these tokens, where the budget allows one.
constexpr uint32_t kHtPartGranule = 32;

// The tokens per rank of one part of a high-throughput step of `config` on `topology`
// (max_tokens_per_rank where steps run whole), `window_bytes(P)` being the window a part of P
// tokens plans. Throws EPC_ERR_INVALID_ARGUMENT naming the variable for a value of
// EPCOMM_HT_PART_TOKENS that is not a number in range.
uint32_t ht_part_tokens(const GroupConfig& config, const Topology& topology,
                        const std::function<uint64_t(uint32_t)>& window_bytes);

// The parts of a step: ceil(max_tokens_per_rank / part_tokens).
uint32_t ht_parts(const GroupConfig& config, uint32_t part_tokens);

// The configuration the window and each part's layout are planned with: `config` with
// max_tokens_per_rank = part_tokens (and recv_capacity the worst case of that) where steps
// run in parts; `config` itself otherwise.
GroupConfig ht_part_config(const GroupConfig& config, uint32_t part_tokens);

}  // namespace epc
