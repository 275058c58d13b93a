// SPDX-License-Identifier: Apache-2.0
#include "core/ll/ll_outputs.hpp"

#include <string>

#include "core/error.hpp"
#include "core/scale_output.hpp"
#include "core/tensor_check.hpp"
#include "kernels/wire/limits.hpp"

namespace epc {

void check_ll_rows_tensor(const EpcTensor* tensor, const char* field, EpcDtype dtype, const HandleSetup& setup,
                          const LlShape& s) {
  switch (setup.layout) {
    case EPC_LAYOUT_RANK_MAJOR:
      check_tensor(tensor, {field, {dtype}, {s.ranks, s.max_tokens, s.hidden}});
      break;
    case EPC_LAYOUT_FLAT:
      check_tensor(tensor, {field, {dtype}, {s.ranks * s.max_tokens, s.hidden}});
      break;
    default:
      check_tensor(tensor, {field, {dtype}, {s.local_experts, static_cast<int64_t>(setup.capacity), s.hidden}});
      break;
  }
}

namespace {

// [R, T, K] (RANK_MAJOR) or [R * T, K] (FLAT): one row of K slots per received token.
void check_slots_tensor(const EpcTensor* tensor, const char* field, EpcDtype dtype, bool rank_major, const LlShape& s) {
  if (rank_major) {
    check_tensor(tensor, {field, {dtype}, {s.ranks, s.max_tokens, s.topk}, 4});
  } else {
    check_tensor(tensor, {field, {dtype}, {s.ranks * s.max_tokens, s.topk}, 4});
  }
}

}  // namespace

LlOutputs check_ll_dispatch_outputs(const EpcDispatchArgs& a, const HandleSetup& setup, const LlShape& s,
                                    const PassthroughPayload* passthrough) {
  const EpcLayout layout = setup.layout;
  const bool padded = layout == EPC_LAYOUT_EXPERT_PADDED;
  const bool fp8 = a.quant == EPC_QUANT_FP8;
  if (a.topk_weights == nullptr && a.out_topk_weights != nullptr) {
    fail_argument("EpcDispatchArgs.topk_weights is NULL; out_topk_weights is written from them");
  }
  if (a.topk_weights != nullptr) {
    check_tensor(a.topk_weights, {"EpcDispatchArgs.topk_weights", {EPC_DTYPE_FP32}, {s.tokens, s.topk}, 4});
  }
  // A passthrough row has the payload's columns (hidden / 2 for packed e2m1).
  LlShape rows = s;
  if (passthrough != nullptr) rows.hidden = passthrough->columns;
  check_ll_rows_tensor(a.out_x, "EpcDispatchArgs.out_x", fp8 ? EPC_DTYPE_FP8_E4M3 : a.x->dtype, setup, rows);
  if (fp8 && a.out_scales == nullptr) fail_argument("EpcDispatchArgs.out_scales is NULL; EPC_QUANT_FP8 needs it");

  const std::string no_column = std::string(layout_name(layout)) + " has no such output";
  require_absent(a.out_expert_offsets, "EpcDispatchArgs.out_expert_offsets", no_column.c_str());
  if (layout != EPC_LAYOUT_RANK_MAJOR) {
    require_absent(a.out_rank_counts, "EpcDispatchArgs.out_rank_counts", no_column.c_str());
  } else {
    require_absent(a.out_expert_counts, "EpcDispatchArgs.out_expert_counts", no_column.c_str());
  }
  if (layout != EPC_LAYOUT_FLAT) require_absent(a.out_num_recv, "EpcDispatchArgs.out_num_recv", no_column.c_str());
  if (a.out_expert_counts != nullptr) {
    check_tensor(a.out_expert_counts, {"EpcDispatchArgs.out_expert_counts", {EPC_DTYPE_INT32}, {s.local_experts}, 4});
  }
  // out_scales: [L, C, .], [R, T, .] or [R * T, .] of the cast's or the caller's scales.
  const bool rank_major = layout == EPC_LAYOUT_RANK_MAJOR;
  const int64_t zones = padded ? s.local_experts : rank_major ? s.ranks : -1;
  const int64_t zone_rows = padded       ? static_cast<int64_t>(setup.capacity)
                            : rank_major ? s.max_tokens
                                         : s.ranks * s.max_tokens;
  LlOutputs out;
  if (fp8) {
    const int64_t scales = s.hidden / limits::kFp8BlockChannels;
    out.scales = zones < 0 ? fp8_scale_output_rows(a.out_scales, zone_rows, scales)
                           : fp8_scale_output(a.out_scales, zones, zone_rows, scales);
  } else if (passthrough != nullptr) {
    const EpcDtype dtype = passthrough->scale_dtype;
    const int64_t scales = passthrough->scale_count;
    out.scales = zones < 0 ? passthrough_scale_output_rows(a.out_scales, dtype, zone_rows, scales)
                           : passthrough_scale_output(a.out_scales, dtype, zones, zone_rows, scales);
  }
  if (padded) {
    require_absent(a.out_topk_idx, "EpcDispatchArgs.out_topk_idx", no_column.c_str());
    require_unserved(a.out_topk_weights, "EpcDispatchArgs.out_topk_weights", "the weight of each row, [L, C]");
    return out;
  }
  if (a.out_topk_idx != nullptr) {
    check_slots_tensor(a.out_topk_idx, "EpcDispatchArgs.out_topk_idx", EPC_DTYPE_INT32, rank_major, s);
    out.topk_idx = static_cast<int32_t*>(a.out_topk_idx->data);
  }
  if (a.out_topk_weights != nullptr) {
    check_slots_tensor(a.out_topk_weights, "EpcDispatchArgs.out_topk_weights", EPC_DTYPE_FP32, rank_major, s);
    out.topk_weights = static_cast<float*>(a.out_topk_weights->data);
  }
  if (a.out_rank_counts != nullptr) {
    check_tensor(a.out_rank_counts, {"EpcDispatchArgs.out_rank_counts", {EPC_DTYPE_INT32}, {s.ranks}, 4});
    out.rank_counts = static_cast<int32_t*>(a.out_rank_counts->data);
  }
  if (a.out_num_recv != nullptr) {
    check_tensor(a.out_num_recv, {"EpcDispatchArgs.out_num_recv", {EPC_DTYPE_INT32}, {1}, 4});
    out.num_recv = static_cast<int32_t*>(a.out_num_recv->data);
  }
  return out;
}

void check_ll_passthrough_fits(const PassthroughPayload& payload, uint32_t max_token_bytes) {
  if (payload.row + payload.scale_bytes <= static_cast<int64_t>(max_token_bytes)) return;
  fail_argument(
      format("EpcDispatchArgs.x_scales: a row of x (%lld bytes) and its %lld scales (%lld bytes) exceed the %u bytes "
             "per token of this low-latency group's messages (EpcGroupConfig.max_token_bytes, which low-latency groups "
             "round down to 2 * hidden, or to hidden + hidden / 32 below that)",
             static_cast<long long>(payload.row), static_cast<long long>(payload.scale_count),
             static_cast<long long>(payload.scale_bytes), max_token_bytes));
}

EpcWeighting resolve_ll_weighting(EpcWeighting weighting, EpcLayout layout, uint32_t group_flags) {
  if (layout == EPC_LAYOUT_EXPERT_PADDED) {
    if (weighting == EPC_WEIGHTING_NONE) {
      fail_unsupported(format(
          "EpcCombineArgs.weighting EPC_WEIGHTING_NONE is not served on low-latency EPC_LAYOUT_EXPERT_PADDED handles "
          "in ABI %d.%d (they weight on the expert's rank, EPC_WEIGHTING_SENDER, or on the token's, "
          "EPC_WEIGHTING_HOME)",
          EPC_ABI_MAJOR, EPC_ABI_MINOR));
    }
    return resolve_expert_weighting(weighting, group_flags);
  }
  if (weighting == EPC_WEIGHTING_SENDER || weighting == EPC_WEIGHTING_HOME) {
    fail_argument(
        format("EpcCombineArgs.weighting: EPC_WEIGHTING_SENDER and EPC_WEIGHTING_HOME apply to the expert layouts; "
               "%s rows are summed as given (the caller weighted them: EPC_WEIGHTING_NONE)",
               layout_name(layout)));
  }
  return EPC_WEIGHTING_NONE;
}

}  // namespace epc
