// SPDX-License-Identifier: Apache-2.0
#include "core/config.hpp"

#include "core/error.hpp"
#include "core/versioned_struct.hpp"

namespace epc {

namespace {

uint32_t or_default(uint32_t value, uint32_t fallback) { return value != 0 ? value : fallback; }

void check_range(const char* field, uint32_t value, uint32_t lo, uint32_t hi) {
  if (value < lo || value > hi) {
    fail_argument(format("EpcGroupConfig.%s is %u; it must be in [%u, %u]", field, value, lo, hi));
  }
}

}  // namespace

const char* dtype_name(EpcDtype dtype) {
  switch (dtype) {
    case EPC_DTYPE_BF16:
      return "bf16";
    case EPC_DTYPE_FP16:
      return "fp16";
    case EPC_DTYPE_FP32:
      return "fp32";
    case EPC_DTYPE_FP8_E4M3:
      return "fp8 e4m3";
    case EPC_DTYPE_INT32:
      return "int32";
    case EPC_DTYPE_INT64:
      return "int64";
    default:
      return "unknown dtype";
  }
}

GroupConfig resolve_config(const EpcGroupConfig* caller) {
  EpcGroupConfig raw = read_versioned(caller, "EpcGroupConfig");
  GroupConfig c;

  c.mode = or_default(raw.mode, EPC_MODE_LOW_LATENCY);
  if (c.mode != EPC_MODE_LOW_LATENCY && c.mode != EPC_MODE_HIGH_THROUGHPUT) {
    fail_argument(
        format("EpcGroupConfig.mode is %u; use EPC_MODE_LOW_LATENCY (1) or "
               "EPC_MODE_HIGH_THROUGHPUT (2)",
               raw.mode));
  }
  bool ll = c.mode == EPC_MODE_LOW_LATENCY;

  if (raw.num_experts == 0) fail_argument("EpcGroupConfig.num_experts is 0; it is required");
  check_range("num_experts", raw.num_experts, 1, limits::kMaxExperts);
  c.num_experts = raw.num_experts;

  if (raw.hidden == 0) fail_argument("EpcGroupConfig.hidden is 0; it is required");
  check_range("hidden", raw.hidden, 1, limits::kMaxHidden);
  if (raw.hidden % limits::kHiddenMultiple != 0) {
    fail_argument(
        format("EpcGroupConfig.hidden is %u; a bf16 row must be a multiple of 16 "
               "bytes, so hidden must be a multiple of %u",
               raw.hidden, limits::kHiddenMultiple));
  }
  c.hidden = raw.hidden;

  c.max_tokens_per_rank =
      or_default(raw.max_tokens_per_rank, ll ? limits::kDefaultLlMaxTokens : limits::kDefaultHtMaxTokens);
  check_range(ll ? "max_tokens_per_rank (low-latency mode)" : "max_tokens_per_rank (high-throughput mode)",
              c.max_tokens_per_rank, 1, ll ? limits::kMaxLlTokens : limits::kMaxHtTokens);

  c.max_topk = or_default(raw.max_topk, limits::kDefaultTopk);
  check_range("max_topk", c.max_topk, 1, limits::kMaxTopk);

  c.dtype = or_default(raw.dtype, EPC_DTYPE_BF16);
  if (c.dtype != EPC_DTYPE_BF16 && c.dtype != EPC_DTYPE_FP16 && c.dtype != EPC_DTYPE_FP8_E4M3) {
    fail(EPC_ERR_UNSUPPORTED, format("EpcGroupConfig.dtype is %u (%s); tokens can be EPC_DTYPE_BF16, EPC_DTYPE_FP16 "
                                     "or EPC_DTYPE_FP8_E4M3",
                                     raw.dtype, dtype_name(raw.dtype)));
  }
  if (c.dtype == EPC_DTYPE_FP8_E4M3 && c.hidden % limits::kFp8BlockChannels != 0) {
    fail_argument(
        format("EpcGroupConfig.hidden is %u; fp8 tokens carry one scale per %u "
               "channels, so hidden must be a multiple of %u",
               c.hidden, limits::kFp8BlockChannels, limits::kFp8BlockChannels));
  }

  c.num_sms = or_default(raw.num_sms, ll ? limits::kDefaultLlSms : limits::kDefaultHtSms);
  check_range("num_sms", c.num_sms, 1, limits::kMaxSms);

  c.timeout_ms = or_default(raw.timeout_ms, limits::kDefaultTimeoutMs);

  c.virtual_node_size = raw.virtual_node_size;  // checked against the LSA team size later
  if (raw.flags != 0) {
    fail_argument(
        format("EpcGroupConfig.flags is 0x%x; no flags are defined in ABI %d.%d, it "
               "must be 0",
               raw.flags, EPC_ABI_MAJOR, EPC_ABI_MINOR));
  }
  if ((raw.alloc_fn == nullptr) != (raw.free_fn == nullptr)) {
    fail_argument("EpcGroupConfig: set both alloc_fn and free_fn, or neither");
  }
  c.alloc_fn = raw.alloc_fn;
  c.free_fn = raw.free_fn;
  c.alloc_ctx = raw.alloc_ctx;
  return c;
}

void check_config_for_ranks(const GroupConfig& c, int nranks) {
  if (nranks < 1) fail_argument(format("rank count is %d; it must be at least 1", nranks));
  if (c.num_experts % static_cast<uint32_t>(nranks) != 0) {
    fail_argument(
        format("EpcGroupConfig.num_experts is %u, not divisible by the %d ranks: "
               "every rank must host the same number of experts",
               c.num_experts, nranks));
  }
}

}  // namespace epc
