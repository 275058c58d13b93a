// SPDX-License-Identifier: Apache-2.0
// A group configuration after the ABI struct rules and defaults have been applied, and the
// checks every configuration must pass (shared by epc_plan_query and epc_group_create).
#pragma once

#include <cstdint>

#include "epcomm/epcomm.h"
#include "kernels/wire/limits.hpp"

namespace epc {

struct GroupConfig {
  EpcMode mode = EPC_MODE_LOW_LATENCY;
  uint32_t num_experts = 0;
  uint32_t hidden = 0;
  uint32_t max_tokens_per_rank = 0;
  uint32_t max_topk = 0;
  // What the window's rows hold, from max_token_bytes: EPC_DTYPE_BF16 for 16-bit rows (fp8
  // rows fit too), EPC_DTYPE_FP8_E4M3 for fp8 rows with their scales only.
  EpcDtype dtype = EPC_DTYPE_BF16;
  uint64_t recv_capacity = 0;  // 0: the worst case, ranks * max_tokens_per_rank
  EpcOverflow overflow = EPC_OVERFLOW_FAIL;
  uint32_t max_pending_steps = 2;
  uint32_t flags = 0;
  uint32_t num_sms = 0;
  uint32_t timeout_ms = 0;
  uint32_t virtual_node_size = 0;  // 0: nodes are the LSA teams
  EpcAllocFn alloc_fn = nullptr;
  EpcFreeFn free_fn = nullptr;
  void* alloc_ctx = nullptr;

  // Bytes of one token's payload in transit: the row, plus one fp32 scale per 128
  // channels for fp8.
  uint64_t payload_row_bytes() const {
    return dtype == EPC_DTYPE_FP8_E4M3 ? uint64_t{hidden} + uint64_t{hidden} / kernels::kFp8BlockChannels * 4
                                       : uint64_t{hidden} * 2;
  }
  // EpcGroupConfig.max_token_bytes after its default (0: 2 * hidden), before any rounding.
  uint32_t token_bytes = 0;
  // max_token_bytes as the window holds it: LL rounds down to payload_row_bytes(); HT slots
  // (since 2.1) hold token_bytes itself (kernels/wire/ht_message.hpp, ht_payload_bytes).
  uint32_t max_token_bytes() const {
    return mode == EPC_MODE_HIGH_THROUGHPUT ? token_bytes : static_cast<uint32_t>(payload_row_bytes());
  }
  uint32_t local_experts(int nranks) const { return num_experts / static_cast<uint32_t>(nranks); }
  // Tokens one rank can receive at most: every rank sends it every token.
  uint64_t worst_case_recv(int nranks) const { return static_cast<uint64_t>(nranks) * max_tokens_per_rank; }
  uint64_t recv_capacity_for(int nranks) const { return recv_capacity != 0 ? recv_capacity : worst_case_recv(nranks); }
  // HT combine slots per (source, token) stream position: max_topk with
  // EPC_GROUP_COMBINE_PER_ENTRY (one per top-k entry, EPC_WEIGHTING_HOME), else one.
  uint32_t combine_slots_per_token() const { return (flags & EPC_GROUP_COMBINE_PER_ENTRY) != 0 ? max_topk : 1; }
};

// Defaults, and the limits a configuration is checked against. Those the kernels rely on
// too are defined in kernels/wire/limits.hpp.
namespace limits {
using kernels::kFp8BlockChannels;
using kernels::kMaxHtTokens;
using kernels::kMaxLlTokens;
using kernels::kMaxTopk;
constexpr uint32_t kDefaultLlMaxTokens = 128;
constexpr uint32_t kDefaultHtMaxTokens = 4096;
constexpr uint32_t kDefaultTopk = 8;
// LL: 132 SMs, every SM of the GPUs the library is tuned on (fewer SMs only mean no fused
// launch); HT: a budget that leaves most SMs to the caller's compute (docs/tuning.md).
constexpr uint32_t kDefaultLlSms = 132;
constexpr uint32_t kDefaultHtSms = 24;
constexpr uint32_t kMaxSms = 1024;
constexpr uint32_t kDefaultTimeoutMs = 10000;
// Send-only steps awaiting epc_complete per group: two by default (two micro-batches), which
// the LL window's two slots per direction serve; each one more adds a slot
// (kernels/wire/limits.hpp).
constexpr uint32_t kDefaultPendingSteps = 2;
constexpr uint32_t kMaxPendingSteps = kernels::kLlMaxSlots;
static_assert(kDefaultPendingSteps <= kernels::kLlMinSlots, "the default window is the two-slot one");
// Rows move in 16-byte vectors: a bf16 row of `hidden` channels must be a multiple of 16 B.
constexpr uint32_t kHiddenMultiple = 8;
// Keeps every per-rank buffer size comfortably inside 64-bit arithmetic and 32-bit indices.
constexpr uint32_t kMaxHidden = 1u << 20;
constexpr uint32_t kMaxExperts = 1u << 16;
// HT max_token_bytes per channel of hidden: an fp32 row (4) with one fp32 scale per
// channel (4) is the most a passthrough row can carry. With kMaxHidden it keeps a slot below
// 2^24 bytes, so its 32-bit offsets are exact.
constexpr uint32_t kMaxTokenBytesPerChannel = 8;
}  // namespace limits

const char* dtype_name(EpcDtype dtype);

// Applies struct_size/abi_version rules, fills defaults and checks every field that does not
// depend on the rank count. Throws epc::Error naming the field on bad input.
GroupConfig resolve_config(const EpcGroupConfig* config);

// Checks what depends on the rank count: experts divisible by ranks, the receive capacity.
void check_config_for_ranks(const GroupConfig& config, int nranks);

}  // namespace epc
