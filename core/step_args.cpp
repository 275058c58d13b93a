// SPDX-License-Identifier: Apache-2.0
#include "core/step_args.hpp"

#include "core/error.hpp"
#include "core/tensor_check.hpp"
#include "core/versioned_struct.hpp"

namespace epc {

const char* layout_name(EpcLayout layout) {
  switch (layout) {
    case EPC_LAYOUT_EXPERT_PADDED:
      return "EPC_LAYOUT_EXPERT_PADDED";
    case EPC_LAYOUT_EXPERT_PACKED:
      return "EPC_LAYOUT_EXPERT_PACKED";
    case EPC_LAYOUT_RANK_MAJOR:
      return "EPC_LAYOUT_RANK_MAJOR";
    case EPC_LAYOUT_FLAT:
      return "EPC_LAYOUT_FLAT";
    default:
      return "an unknown layout";
  }
}

namespace {

const char* mode_name(EpcMode mode) { return mode == EPC_MODE_LOW_LATENCY ? "low-latency" : "high-throughput"; }

constexpr uint32_t kHandleFlags = EPC_HANDLE_ZERO_PADDING | EPC_HANDLE_GLOBAL_EXPERT_IDS;
constexpr uint32_t kDispatchFlags = EPC_STEP_SEND_ONLY | EPC_DISPATCH_POW2_SCALES;
constexpr uint32_t kCombineFlags = EPC_STEP_SEND_ONLY;

// A reserved field is one a later minor may give a meaning: non-zero is a newer caller's
// request, refused as the unknown tail of a longer struct is.
void require_reserved_zero(uint32_t value, const char* field) {
  if (value != 0) {
    fail(EPC_ERR_ABI_MISMATCH,
         format("%s is %u; this library (ABI %d.%d) defines no meaning for it: set it to 0 (a non-zero value "
                "asks for a feature of a newer epcomm)",
                field, value, EPC_ABI_MAJOR, EPC_ABI_MINOR));
  }
}

}  // namespace

HandleSetup resolve_handle_config(const EpcHandleConfig* config, const GroupConfig& group, int nranks) {
  EpcHandleConfig raw;
  if (config == nullptr) {
    raw = EPC_HANDLE_CONFIG_INIT;
  } else {
    raw = read_versioned(config, "EpcHandleConfig");
  }
  const bool ll = group.mode == EPC_MODE_LOW_LATENCY;
  HandleSetup s;
  if (raw.layout > EPC_LAYOUT_FLAT) {
    fail_argument(
        format("EpcHandleConfig.layout is %u; use 0 (the mode's default) or an EPC_LAYOUT_* value (1-4)", raw.layout));
  }
  s.layout = raw.layout != EPC_LAYOUT_DEFAULT ? raw.layout : (ll ? EPC_LAYOUT_EXPERT_PADDED : EPC_LAYOUT_FLAT);
  if (raw.sizing != EPC_SIZING_CAPACITY && raw.sizing != EPC_SIZING_EXACT) {
    fail_argument(
        format("EpcHandleConfig.sizing is %u; use EPC_SIZING_CAPACITY (0) or EPC_SIZING_EXACT (1)", raw.sizing));
  }
  s.sizing = raw.sizing;
  if (s.sizing == EPC_SIZING_EXACT && (s.layout == EPC_LAYOUT_EXPERT_PADDED || s.layout == EPC_LAYOUT_RANK_MAJOR)) {
    fail_argument(
        format("EpcHandleConfig.sizing is EPC_SIZING_EXACT, which sizes [rows, ...] layouts; %s has fixed "
               "zones (use EPC_SIZING_CAPACITY)",
               layout_name(s.layout)));
  }
  if (s.sizing == EPC_SIZING_EXACT && raw.capacity != 0) {
    fail_argument("EpcHandleConfig.capacity must be 0 with EPC_SIZING_EXACT, which takes the rows that arrive");
  }
  if (s.layout == EPC_LAYOUT_RANK_MAJOR && raw.capacity != 0) {
    fail_argument(
        "EpcHandleConfig.capacity must be 0 with EPC_LAYOUT_RANK_MAJOR, whose zones hold max_tokens_per_rank");
  }
  if (s.layout != EPC_LAYOUT_EXPERT_PACKED && raw.expert_alignment != 0) {
    fail_argument(
        format("EpcHandleConfig.expert_alignment is %u; it applies to EPC_LAYOUT_EXPERT_PACKED only, "
               "and must be 0 for %s",
               raw.expert_alignment, layout_name(s.layout)));
  }
  if ((raw.flags & ~kHandleFlags) != 0) {
    fail_argument(format("EpcHandleConfig.flags has unknown bits 0x%x", raw.flags & ~kHandleFlags));
  }
  if ((raw.flags & EPC_HANDLE_ZERO_PADDING) != 0 && s.layout != EPC_LAYOUT_EXPERT_PACKED) {
    fail_argument(
        format("EpcHandleConfig.flags: EPC_HANDLE_ZERO_PADDING applies to EPC_LAYOUT_EXPERT_PACKED only, "
               "not %s",
               layout_name(s.layout)));
  }
  s.flags = raw.flags;
  s.expert_alignment = raw.expert_alignment != 0 ? raw.expert_alignment : 1;
  const EpcLayout served = ll ? EPC_LAYOUT_EXPERT_PADDED : EPC_LAYOUT_FLAT;
  const bool ht_packed = !ll && s.layout == EPC_LAYOUT_EXPERT_PACKED;
  const bool ll_tokens = ll && (s.layout == EPC_LAYOUT_RANK_MAJOR || s.layout == EPC_LAYOUT_FLAT);
  if (s.layout != served && !ht_packed && !ll_tokens) {
    fail_unsupported(format("EpcHandleConfig.layout %s is not served on %s groups in ABI %d.%d (they serve %s%s)",
                            layout_name(s.layout), mode_name(group.mode), EPC_ABI_MAJOR, EPC_ABI_MINOR,
                            layout_name(served),
                            ll ? ", EPC_LAYOUT_RANK_MAJOR and EPC_LAYOUT_FLAT" : " and EPC_LAYOUT_EXPERT_PACKED"));
  }
  if (ll && s.sizing == EPC_SIZING_EXACT) {
    fail_unsupported(
        format("EpcHandleConfig.sizing EPC_SIZING_EXACT is not served on low-latency groups in ABI %d.%d (their "
               "EPC_LAYOUT_FLAT holds ranks * max_tokens_per_rank rows, with no host synchronisation)",
               EPC_ABI_MAJOR, EPC_ABI_MINOR));
  }
  // R * T rows per expert zone (EXPERT_PADDED); FLAT: the recv_capacity tokens the group's
  // window holds; EXPERT_PACKED: the rows R * T tokens of max_topk entries can take in
  // aligned zones.
  const uint64_t window = group.recv_capacity_for(nranks);
  if (ht_packed && window < group.worst_case_recv(nranks)) {
    fail_unsupported(
        format("EpcHandleConfig.layout EPC_LAYOUT_EXPERT_PACKED is not served in ABI %d.%d on groups whose "
               "EpcGroupConfig.recv_capacity (%llu) is below ranks * max_tokens_per_rank (%llu); use "
               "EPC_LAYOUT_FLAT, which serves any capacity",
               EPC_ABI_MAJOR, EPC_ABI_MINOR, static_cast<unsigned long long>(window),
               static_cast<unsigned long long>(group.worst_case_recv(nranks))));
  }
  const uint64_t worst = ht_packed ? ht_packed_worst_rows(group.worst_case_recv(nranks) * group.max_topk,
                                                          group.local_experts(nranks), s.expert_alignment)
                         : ll      ? group.worst_case_recv(nranks)
                                   : window;
  // Kernels number a handle's rows and zone starts as int32.
  if (ht_packed && worst > static_cast<uint64_t>(INT32_MAX)) {
    fail_argument(
        format("EpcHandleConfig.expert_alignment is %u: zones aligned to it can take %llu rows, past the "
               "2^31 - 1 rows a handle holds",
               raw.expert_alignment, static_cast<unsigned long long>(worst)));
  }
  s.capacity = raw.capacity != 0 ? raw.capacity : worst;
  if (s.layout == EPC_LAYOUT_FLAT && s.capacity > worst) {
    fail_argument(
        format("EpcHandleConfig.capacity is %llu rows; at most %llu tokens (%s) can arrive, so "
               "EPC_LAYOUT_FLAT needs no more rows",
               static_cast<unsigned long long>(raw.capacity), static_cast<unsigned long long>(worst),
               ll ? "ranks * max_tokens_per_rank" : "EpcGroupConfig.recv_capacity"));
  }
  if ((ll || ht_packed) && s.capacity != worst) {
    fail_unsupported(
        format("EpcHandleConfig.capacity is %llu; ABI %d.%d serves only the default for %s, %llu rows "
               "(ranks * max_tokens_per_rank%s); pass 0%s",
               static_cast<unsigned long long>(raw.capacity), EPC_ABI_MAJOR, EPC_ABI_MINOR, layout_name(s.layout),
               static_cast<unsigned long long>(worst),
               !ll                                    ? " * max_topk, in aligned expert zones"
               : s.layout == EPC_LAYOUT_EXPERT_PADDED ? " per expert zone"
                                                      : " in all",
               ll_tokens ? " (low-latency groups hold every token that can arrive)"
                         : " (EPC_LAYOUT_FLAT serves any capacity)"));
  }
  return s;
}

uint64_t ht_packed_worst_rows(uint64_t entries, uint64_t zones, uint64_t alignment) {
  const uint64_t a = alignment != 0 ? alignment : 1;
  if (entries == 0 || zones == 0) return 0;
  // A zone of n > 0 entries takes at most n + a - 1 rows, and the total is a multiple of a.
  return (entries + (zones < entries ? zones : entries) * (a - 1)) / a * a;
}

EpcHandleInfo handle_info(EpcMode mode, const HandleSetup& setup, uint64_t id, int num_tokens, int topk,
                          uint32_t pending, int64_t rows) {
  EpcHandleInfo i = EPC_HANDLE_INFO_INIT;
  i.mode = mode;
  i.layout = setup.layout;
  i.sizing = setup.sizing;
  i.expert_alignment = setup.layout == EPC_LAYOUT_EXPERT_PACKED ? setup.expert_alignment : 0;
  i.num_tokens = static_cast<uint32_t>(num_tokens);
  i.topk = static_cast<uint32_t>(topk);
  i.pending = pending;
  i.flags = setup.flags;
  i.capacity = setup.capacity;
  i.rows = rows;
  // LL steps never overflow; HT handles fill these from their layout's record.
  i.overflow_status = EPC_OK;
  i.overflow_rank = -1;
  i.overflow_rows = 0;
  i.id = id;
  return i;
}

const EpcTensor* routing_tensor(const EpcRouting* routing) {
  if (routing == nullptr) fail_argument("EpcRouting pointer is NULL; the routing is required here");
  const EpcRouting r = read_versioned(routing, "EpcRouting");
  if (r.topk_idx == nullptr) fail_argument("EpcRouting.topk_idx is NULL; it is required");
  if (r.num_tokens != nullptr) {
    fail_unsupported(format("EpcRouting.num_tokens (a device-side token count) is not served in ABI %d.%d",
                            EPC_ABI_MAJOR, EPC_ABI_MINOR));
  }
  return r.topk_idx;
}

EpcDispatchArgs read_dispatch_args(const EpcDispatchArgs* args) {
  if (args == nullptr) fail_argument("EpcDispatchArgs pointer is NULL; x and out_x are required");
  const EpcDispatchArgs a = read_versioned(args, "EpcDispatchArgs");
  if ((a.flags & ~kDispatchFlags) != 0) {
    fail_argument(format("EpcDispatchArgs.flags has unknown bits 0x%x", a.flags & ~kDispatchFlags));
  }
  if (a.quant > EPC_QUANT_PASSTHROUGH) {
    fail_argument(format("EpcDispatchArgs.quant is %u; use an EPC_QUANT_* value (0-3)", a.quant));
  }
  if ((a.flags & EPC_DISPATCH_POW2_SCALES) != 0 && a.quant != EPC_QUANT_FP8) {
    fail_argument("EpcDispatchArgs.flags: EPC_DISPATCH_POW2_SCALES applies to EPC_QUANT_FP8 only");
  }
  if (a.scale_layout > EPC_SCALES_SWIZZLED_128X4) {
    fail_argument(format("EpcDispatchArgs.scale_layout is %u; use an EPC_SCALES_* value (0-1)", a.scale_layout));
  }
  if (a.quant == EPC_QUANT_NONE && (a.scale_block != 0 || a.scale_layout != EPC_SCALES_STRIDED)) {
    fail_argument("EpcDispatchArgs.scale_block and scale_layout must be 0 with EPC_QUANT_NONE (no scales travel)");
  }
  if (a.quant == EPC_QUANT_NVFP4) {
    fail_unsupported(
        format("EpcDispatchArgs.quant EPC_QUANT_NVFP4 is not served in ABI %d.%d", EPC_ABI_MAJOR, EPC_ABI_MINOR));
  }
  if (a.x_global_scale != nullptr && a.quant != EPC_QUANT_PASSTHROUGH) {
    // Checked with the payload (core/passthrough.cpp): fp4 e2m1x2 x only.
    fail_argument(
        "EpcDispatchArgs.x_global_scale applies to EPC_QUANT_NVFP4 and to EPC_QUANT_PASSTHROUGH of fp4 e2m1x2 x "
        "only");
  }
  if (a.scale_layout == EPC_SCALES_SWIZZLED_128X4) {
    fail_unsupported(format("EpcDispatchArgs.scale_layout EPC_SCALES_SWIZZLED_128X4 is not served in ABI %d.%d",
                            EPC_ABI_MAJOR, EPC_ABI_MINOR));
  }
  // PASSTHROUGH copies x_scales' S elements per row whatever block they scale (MXFP8's 32
  // channels, NVFP4's 16), so its scale_block only describes the caller's quantization.
  if (a.quant != EPC_QUANT_NONE && a.quant != EPC_QUANT_PASSTHROUGH && a.scale_block != 0 &&
      a.scale_block != kernels::kFp8BlockChannels) {
    fail_unsupported(format("EpcDispatchArgs.scale_block is %u; ABI %d.%d serves one scale per %d channels",
                            a.scale_block, EPC_ABI_MAJOR, EPC_ABI_MINOR, kernels::kFp8BlockChannels));
  }
  if (a.quant != EPC_QUANT_PASSTHROUGH && a.x_scales != nullptr) {
    fail_argument("EpcDispatchArgs.x_scales applies to EPC_QUANT_PASSTHROUGH only (the caller's scales)");
  }
  if (a.quant == EPC_QUANT_NONE && a.out_scales != nullptr) {
    fail_argument("EpcDispatchArgs.out_scales must be NULL with EPC_QUANT_NONE (no scales travel)");
  }
  if (a.out_topk_weights != nullptr && a.topk_weights == nullptr) {
    fail_argument("EpcDispatchArgs.out_topk_weights needs topk_weights, the weights it receives");
  }
  require_reserved_zero(a.reserved0, "EpcDispatchArgs.reserved0");
  require_reserved_zero(a.reserved1, "EpcDispatchArgs.reserved1");
  if (a.x == nullptr) fail_argument("EpcDispatchArgs.x is NULL; it is required");
  if (a.out_x == nullptr) fail_argument("EpcDispatchArgs.out_x is NULL; it is required");
  return a;
}

EpcCombineArgs read_combine_args(const EpcCombineArgs* args) {
  if (args == nullptr) fail_argument("EpcCombineArgs pointer is NULL; x and out are required");
  const EpcCombineArgs a = read_versioned(args, "EpcCombineArgs");
  if ((a.flags & ~kCombineFlags) != 0) {
    fail_argument(format("EpcCombineArgs.flags has unknown bits 0x%x", a.flags & ~kCombineFlags));
  }
  if (a.weighting > EPC_WEIGHTING_HOME) {
    fail_argument(format("EpcCombineArgs.weighting is %u; use an EPC_WEIGHTING_* value (0-3)", a.weighting));
  }
  if ((a.home_topk_weights != nullptr) != (a.weighting == EPC_WEIGHTING_HOME)) {
    fail_argument("EpcCombineArgs.home_topk_weights goes with EPC_WEIGHTING_HOME, and only with it");
  }
  if ((a.topk_weights == nullptr) != (a.out_topk_weights == nullptr)) {
    fail_argument("EpcCombineArgs: pass both topk_weights and out_topk_weights (weights carried back), or neither");
  }
  require_reserved_zero(a.reserved0, "EpcCombineArgs.reserved0");
  if (a.x == nullptr) fail_argument("EpcCombineArgs.x is NULL; it is required");
  if (a.out == nullptr) fail_argument("EpcCombineArgs.out is NULL; it is required");
  return a;
}

EpcWeighting resolve_expert_weighting(EpcWeighting weighting, uint32_t group_flags) {
  if (weighting == EPC_WEIGHTING_HOME && (group_flags & EPC_GROUP_COMBINE_PER_ENTRY) == 0) {
    fail_argument(
        "EpcCombineArgs.weighting is EPC_WEIGHTING_HOME, which returns one row per (token, top-k entry); the "
        "group's combine window holds one per (token, rank): create the group with EpcGroupConfig.flags "
        "EPC_GROUP_COMBINE_PER_ENTRY");
  }
  return weighting == EPC_WEIGHTING_DEFAULT ? EPC_WEIGHTING_SENDER : weighting;
}

EpcWeighting resolve_ht_weighting(EpcWeighting weighting, EpcLayout layout, uint32_t group_flags) {
  if (layout != EPC_LAYOUT_EXPERT_PACKED) {
    if (weighting == EPC_WEIGHTING_SENDER || weighting == EPC_WEIGHTING_HOME) {
      fail_argument(
          "EpcCombineArgs.weighting: EPC_WEIGHTING_SENDER and EPC_WEIGHTING_HOME apply to the expert layouts; "
          "EPC_LAYOUT_FLAT rows are summed as given (the caller weighted them)");
    }
    return EPC_WEIGHTING_NONE;
  }
  return resolve_expert_weighting(weighting, group_flags);
}

int resolve_send_sms(uint32_t send_sms, uint32_t num_sms, int device_sms, const char* field) {
  if (send_sms == 0) return static_cast<int>(num_sms);
  if (send_sms > num_sms) {
    fail_argument(
        format("%s is %u, more than the group's EpcGroupConfig.num_sms (%u), the SMs its steps may "
               "occupy; pass at most that, or 0 for all of it",
               field, send_sms, num_sms));
  }
  if (device_sms > 0 && send_sms > static_cast<uint32_t>(device_sms)) {
    fail_argument(
        format("%s is %u, more than the %d SMs of the group's GPU; pass at most %d, or 0 for the "
               "group's num_sms",
               field, send_sms, device_sms, device_sms));
  }
  return static_cast<int>(send_sms);
}

int resolve_max_step_tokens(uint32_t max_step_tokens, int64_t tokens, uint32_t max_tokens_per_rank) {
  if (max_step_tokens == 0) return static_cast<int>(max_tokens_per_rank);
  if (max_step_tokens > max_tokens_per_rank) {
    fail_argument(format("EpcDispatchArgs.max_step_tokens is %u, above the group's max_tokens_per_rank (%u)",
                         max_step_tokens, max_tokens_per_rank));
  }
  if (static_cast<int64_t>(max_step_tokens) < tokens) {
    fail_argument(
        format("EpcDispatchArgs.max_step_tokens is %u, but this rank dispatches %lld tokens in the step "
               "(the handle's routing); it bounds every rank's tokens",
               max_step_tokens, static_cast<long long>(tokens)));
  }
  return static_cast<int>(max_step_tokens);
}

void require_ht_split_served(int nodes, const char* field) {
  if (nodes <= 1) return;
  fail_unsupported(
      format("%s: EPC_STEP_SEND_ONLY is not served on high-throughput groups spanning nodes (this one spans %d, "
             "virtual nodes included) in ABI %d.%d: there each rank's receiving warps also forward its rail "
             "peers' tokens and partial sums inside its node, so the fused launch is required; call without "
             "EPC_STEP_SEND_ONLY",
             field, nodes, EPC_ABI_MAJOR, EPC_ABI_MINOR));
}

void require_absent(const EpcTensor* tensor, const char* field, const char* why) {
  if (tensor != nullptr) fail_argument(format("%s must be NULL: %s", field, why));
}

void require_unserved(const EpcTensor* tensor, const char* field, const char* what) {
  if (tensor != nullptr) {
    fail_unsupported(
        format("%s (%s) is not served in ABI %d.%d; pass NULL", field, what, EPC_ABI_MAJOR, EPC_ABI_MINOR));
  }
}

kernels::SumOutput sum_output_of(EpcDtype dtype) {
  switch (dtype) {
    case EPC_DTYPE_FP16:
      return kernels::SumOutput::kFp16;
    case EPC_DTYPE_FP32:
      return kernels::SumOutput::kFp32;
    default:
      return kernels::SumOutput::kBf16;
  }
}

}  // namespace epc
