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
    case EPC_DTYPE_UINT8:
      return "uint8";
    case EPC_DTYPE_FP8_E5M2:
      return "fp8 e5m2";
    case EPC_DTYPE_E8M0:
      return "e8m0";
    case EPC_DTYPE_E8M0X4:
      return "e8m0x4";
    case EPC_DTYPE_FP4_E2M1X2:
      return "fp4 e2m1x2";
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

  // The window holds 16-bit rows, or (down to H + H / 32) fp8 rows with their scales only.
  const uint64_t half_bytes = uint64_t{c.hidden} * 2;
  const uint64_t fp8_bytes = uint64_t{c.hidden} + uint64_t{c.hidden} / limits::kFp8BlockChannels * 4;
  const uint64_t token_bytes = raw.max_token_bytes == 0 ? half_bytes : raw.max_token_bytes;
  // HT slots hold max_token_bytes as given (LL rounds it down): bound it so that a slot's
  // 32-bit offsets stay exact; no row plus scales needs more.
  const uint64_t most_token_bytes = uint64_t{c.hidden} * limits::kMaxTokenBytesPerChannel;
  if (!ll && token_bytes > most_token_bytes) {
    fail_argument(
        format("EpcGroupConfig.max_token_bytes is %u; high-throughput groups hold at most %u bytes per "
               "channel of hidden (%llu bytes with hidden %u)",
               raw.max_token_bytes, limits::kMaxTokenBytesPerChannel, static_cast<unsigned long long>(most_token_bytes),
               c.hidden));
  }
  c.token_bytes = static_cast<uint32_t>(token_bytes);
  if (token_bytes >= half_bytes) {
    c.dtype = EPC_DTYPE_BF16;
  } else if (c.hidden % limits::kFp8BlockChannels == 0 && token_bytes >= fp8_bytes) {
    c.dtype = EPC_DTYPE_FP8_E4M3;
  } else {
    fail_argument(
        format("EpcGroupConfig.max_token_bytes is %u; with hidden %u a token needs at least %llu bytes "
               "(bf16 or fp16: 2 * hidden)%s",
               raw.max_token_bytes, c.hidden,
               static_cast<unsigned long long>(c.hidden % limits::kFp8BlockChannels == 0 ? fp8_bytes : half_bytes),
               c.hidden % limits::kFp8BlockChannels == 0
                   ? ", or hidden + hidden / 32 for fp8 rows with one fp32 scale per 128 channels"
                   : ""));
  }

  c.recv_capacity = raw.recv_capacity;  // checked against R * T with the rank count
  if (raw.overflow != EPC_OVERFLOW_FAIL && raw.overflow != EPC_OVERFLOW_DROP) {
    fail_argument(
        format("EpcGroupConfig.overflow is %u; use EPC_OVERFLOW_FAIL (0) or EPC_OVERFLOW_DROP (1)", raw.overflow));
  }
  c.overflow = raw.overflow;
  c.max_pending_steps = or_default(raw.max_pending_steps, limits::kDefaultPendingSteps);
  if (c.max_pending_steps > limits::kMaxPendingSteps) {
    fail(EPC_ERR_UNSUPPORTED,
         format("EpcGroupConfig.max_pending_steps is %u; this library serves at most %u pending send-only "
                "steps per group (each holds a low-latency receive slot of its own until its epc_complete)",
                raw.max_pending_steps, limits::kMaxPendingSteps));
  }

  c.num_sms = or_default(raw.num_sms, ll ? limits::kDefaultLlSms : limits::kDefaultHtSms);
  check_range("num_sms", c.num_sms, 1, limits::kMaxSms);

  c.timeout_ms = or_default(raw.timeout_ms, limits::kDefaultTimeoutMs);

  c.virtual_node_size = raw.virtual_node_size;  // checked against the LSA team size later
  if ((raw.flags & ~EPC_GROUP_COMBINE_PER_ENTRY) != 0) {
    fail_argument(format("EpcGroupConfig.flags has unknown bits 0x%x (EPC_GROUP_COMBINE_PER_ENTRY is 0x%x)",
                         raw.flags & ~EPC_GROUP_COMBINE_PER_ENTRY, EPC_GROUP_COMBINE_PER_ENTRY));
  }
  c.flags = raw.flags;
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
  const uint64_t worst = c.worst_case_recv(nranks);
  if (c.recv_capacity > worst) {
    fail_argument(
        format("EpcGroupConfig.recv_capacity is %llu; at most %llu tokens (ranks * max_tokens_per_rank) "
               "can arrive, so it must not be larger",
               static_cast<unsigned long long>(c.recv_capacity), static_cast<unsigned long long>(worst)));
  }
  if (c.mode == EPC_MODE_LOW_LATENCY && c.recv_capacity != 0 && c.recv_capacity < worst) {
    fail(EPC_ERR_UNSUPPORTED,
         format("EpcGroupConfig.recv_capacity is %llu, below the %llu tokens (ranks * max_tokens_per_rank) that can "
                "arrive; low-latency windows hold the worst case by construction in ABI %d.%d (pass 0)",
                static_cast<unsigned long long>(c.recv_capacity), static_cast<unsigned long long>(worst), EPC_ABI_MAJOR,
                EPC_ABI_MINOR));
  }
}

}  // namespace epc
