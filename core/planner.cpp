// SPDX-License-Identifier: Apache-2.0
#include "core/planner.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"
#include "core/gin_signal_plan.hpp"
#include "core/handle_memory.hpp"
#include "core/ht/ht_parts.hpp"
#include "core/ht/ht_rings.hpp"
#include "core/staging_plan.hpp"
#include "kernels/wire/ht_message.hpp"
#include "kernels/wire/ll_message.hpp"
#include "kernels/wire/ll_state.hpp"
#include "kernels/wire/shared_bytes.hpp"

namespace epc {

namespace {

constexpr uint32_t kWarpsPerBlock = 32;
// Beside the window, the low-latency step state (kernels/wire/ll_state.hpp).
constexpr uint64_t kLlStateBytes = 256;
static_assert(sizeof(kernels::LlState) <= kLlStateBytes, "EpcPlan.workspace_bytes covers the step state");
// The control region, four regions per low-latency slot, and the network staging.
static_assert(2 + 4 * kernels::kLlMaxSlots <= EPC_PLAN_MAX_REGIONS, "every low-latency plan fits EpcPlan.regions");

uint64_t align_up(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

class LayoutBuilder {
 public:
  explicit LayoutBuilder(Plan& plan) : plan_(plan) {}

  void add(EpcRegionKind kind, uint32_t slot, uint64_t size, const std::string& base_name) {
    Region r;
    r.kind = kind;
    r.slot = slot;
    r.offset = cursor_;
    r.size = align_up(size, kRegionAlignment);
    r.name = slot == EPC_SLOT_NONE ? base_name : format("%s[%u]", base_name.c_str(), slot);
    cursor_ += r.size;
    plan_.regions.push_back(r);
  }

  uint64_t cursor() const { return cursor_; }
  uint64_t end() const { return align_up(cursor_, kWindowAlignment); }

 private:
  Plan& plan_;
  uint64_t cursor_ = 0;
};

void plan_low_latency(const GroupConfig& c, const Topology& t, Plan& plan, LayoutBuilder& b) {
  const int T = static_cast<int>(c.max_tokens_per_rank);
  const uint64_t row = c.payload_row_bytes();
  const uint64_t combine_row = static_cast<uint64_t>(c.hidden) * 2;  // combine is always bf16
  // Each pending send-only step holds a slot of its direction until its epc_complete; a
  // second slot lets consecutive steps alternate, so a step does not wait for every peer to
  // have read the one before it (core/ll/ll_steps.hpp).
  plan.num_slots = std::max<uint32_t>(kernels::kLlMinSlots, c.max_pending_steps);
  plan.ll_line_tokens = ll_line_tokens(c, t.nodes());
  // Receivers read payloads in 16-byte vectors from every message, so messages start
  // 16-byte aligned: an fp8 row plus its scales (hidden + hidden / 32 bytes) is a multiple
  // of 16 only when hidden is a multiple of 512, so pad the message up to one.
  plan.message_bytes = static_cast<uint32_t>(align_up(ll_message_header_bytes(c) + row, kernels::kLlMessageAlignment));
  for (uint32_t s = 0; s < plan.num_slots; ++s) {
    // [R][T] messages, the [R][L] count table, then (where a step may be a line step) [R][line
    // steps] line records and the table's line words.
    b.add(EPC_REGION_DISPATCH_RECV, s,
          kernels::ll_dispatch_slot_bytes(t.nranks, T, plan.message_bytes, static_cast<int>(c.local_experts(t.nranks)),
                                          static_cast<int>(plan.ll_line_tokens)),
          "dispatch_recv");
    b.add(EPC_REGION_DISPATCH_SIGNAL, s, kernels::ll_signal_region_bytes(t.nranks), "dispatch_signal");
    // [R][T] partials, or [R][T][max_entries] entry rows with EPC_GROUP_COMBINE_PER_ENTRY;
    // then [R][line_tokens] line records.
    b.add(EPC_REGION_COMBINE_RECV, s,
          kernels::ll_combine_slot_bytes(t.nranks, T, static_cast<int>(ll_combine_rows_per_token(c)), combine_row) +
              kernels::ll_combine_line_bytes(t.nranks, static_cast<int>(plan.ll_line_tokens), combine_row),
          "combine_recv");
    b.add(EPC_REGION_COMBINE_SIGNAL, s, kernels::ll_signal_region_bytes(t.nranks), "combine_signal");
  }
}

void plan_high_throughput(const GroupConfig& c, const Topology& t, const RingRequest& rings, Plan& plan,
                          LayoutBuilder& b) {
  const uint64_t R = static_cast<uint64_t>(t.nranks);
  const uint64_t T = c.max_tokens_per_rank;
  const uint64_t L = c.local_experts(t.nranks);
  const uint32_t element = c.dtype == EPC_DTYPE_FP8_E4M3 ? 1 : 2;
  const kernels::HtDispatchSlot dispatch = kernels::ht_dispatch_slot(c.hidden, element, c.max_topk, c.token_bytes);
  const kernels::HtCombineSlot combine = kernels::ht_combine_slot(c.hidden, c.max_topk);
  plan.num_slots = 1;
  plan.message_bytes = dispatch.bytes;
  for (uint32_t s = 0; s < kHtLayoutSlots; ++s) {
    b.add(EPC_REGION_LAYOUT, s, ht_layout_slot_bytes(t.nranks, static_cast<int>(L)), "layout");
  }
  // recv_capacity slots: [R][T] at the default R * T, compact below (ht_capacity.hpp); or
  // the rings, where the environment forces them (core/ht/ht_rings.hpp).
  plan.ht_dispatch_rings = plan_ht_rings(rings, t, b.cursor(), dispatch.bytes, c.num_sms);
  b.add(EPC_REGION_DISPATCH_RECV, EPC_SLOT_NONE,
        rings.slots > 0 ? plan.ht_dispatch_rings.bytes() : c.recv_capacity_for(t.nranks) * dispatch.bytes,
        "dispatch_recv");
  b.add(EPC_REGION_DISPATCH_SIGNAL, EPC_SLOT_NONE, ht_signal_bytes(c, t.nranks), "dispatch_signal");
  // [R][T] slots, or [R][T * max_topk] for per-entry rows (EPC_WEIGHTING_HOME); or the rings.
  plan.ht_combine_rings = plan_ht_rings(rings, t, b.cursor(), combine.bytes, c.num_sms);
  b.add(EPC_REGION_COMBINE_RECV, EPC_SLOT_NONE,
        rings.slots > 0 ? plan.ht_combine_rings.bytes() : R * T * c.combine_slots_per_token() * combine.bytes,
        "combine_recv");
  b.add(EPC_REGION_COMBINE_SIGNAL, EPC_SLOT_NONE, ht_signal_bytes(c, t.nranks), "combine_signal");
  if (t.nodes() > 1) {
    // Dispatch crosses between nodes once per (token, node), to the rail peer, which
    // forwards inside its node (kernels/wire/ht_message.hpp).
    const uint64_t M = static_cast<uint64_t>(t.nodes());
    const kernels::HtRailSlot rail = kernels::ht_rail_slot(dispatch, static_cast<uint32_t>(t.node_size), c.max_topk);
    b.add(EPC_REGION_RAIL_RECV, EPC_SLOT_NONE, M * T * rail.bytes, "rail_recv");
    b.add(EPC_REGION_RAIL_SIGNAL, EPC_SLOT_NONE,
          M * static_cast<uint64_t>(kernels::ht_chunks(static_cast<int>(T))) * sizeof(uint64_t), "rail_signal");
  }
}

// The plan of `c` on `t` (virtual nodes applied) whose high-throughput window holds
// `part_tokens` tokens per rank (0 in low-latency plans), without the checks of its size.
Plan plan_window(const GroupConfig& c, const Topology& t, const RingRequest& rings, uint32_t part_tokens) {
  Plan plan;
  plan.mode = c.mode;
  plan.num_sms = c.num_sms;
  plan.recv_capacity = c.recv_capacity_for(t.nranks);
  plan.max_token_bytes = c.max_token_bytes();
  plan.max_pending_steps = c.max_pending_steps;
  const bool ht = c.mode == EPC_MODE_HIGH_THROUGHPUT;
  plan.ht_part_tokens = part_tokens;
  // The window holds one part of a high-throughput step (every step, where steps run whole).
  const GroupConfig window = ht ? ht_part_config(c, part_tokens) : c;
  plan.handle_bytes = ht ? ht_handle_bytes(c, t, part_tokens, rings.slots > 0) : ll_handle_sizes(c, t.nranks).bytes();
  plan.warps_per_block = kWarpsPerBlock;
  plan.control.barrier_inbox_offset = 0;

  LayoutBuilder builder(plan);
  builder.add(EPC_REGION_CONTROL, EPC_SLOT_NONE, static_cast<uint64_t>(t.nranks) * sizeof(uint64_t), "control");
  if (ht) {
    plan_high_throughput(window, t, rings, plan, builder);
  } else {
    plan_low_latency(c, t, plan, builder);
  }
  if (t.nodes() > 1) {
    // Last, so one-node windows keep every offset: what this rank sends to each rank of
    // another node, its own rows of the arrays peers write (kernels/wire/staging_map.hpp).
    plan.staging_map = plan_staging(window, t, plan);
    plan.staging_map.offset = builder.cursor();
    builder.add(EPC_REGION_NET_STAGING, EPC_SLOT_NONE, plan.staging_map.bytes(), "net_staging");
  }
  // GIN only between LSA teams: virtual nodes inside one team use the stand-in, and asking
  // NCCL for any GIN signal makes it set up GIN, which fails on hosts without it.
  if (t.num_nodes > 1) {
    plan.gin_signal_map = plan_gin_signals(window, t, plan);
    plan.gin_contexts = 1;
    plan.gin_signals = plan.gin_signal_map.total_ids;
  }
  plan.symmetric_bytes = builder.end();
  // Beside the window: the step counters (kernels/wire/ll_state.hpp); handles hold their
  // own arrays (handle_bytes).
  plan.workspace_bytes = kLlStateBytes;
  return plan;
}

// Refuses a group whose launches would ask for more dynamic shared memory than a block may
// have (kernels/wire/shared_bytes.hpp): they would fail with a CUDA launch error at the
// first step instead. `parts`: its HT steps run in parts.
void check_launch_shared(const GroupConfig& c, const Topology& t, bool parts) {
  const bool ht = c.mode == EPC_MODE_HIGH_THROUGHPUT;
  const int L = static_cast<int>(c.local_experts(t.nranks));
  const char* kernel = ht ? "layout" : "combine";
  size_t bytes = ht ? kernels::ht_layout_shared_bytes(t.nranks) : kernels::ll_combine_shared_bytes(t.nranks);
  if (ht && parts && kernels::ht_parts_layout_shared_bytes(t.nranks, L) > bytes) {
    kernel = "parts layout";
    bytes = kernels::ht_parts_layout_shared_bytes(t.nranks, L);
  }
  if (bytes <= kernels::kDynamicSharedBudget) return;
  fail(EPC_ERR_UNSUPPORTED,
       format("a %s group of %d ranks%s needs %zu bytes of shared memory per block in its %s kernel, more than "
              "the %zu its kernels may take: use fewer ranks%s",
              ht ? "high-throughput" : "low-latency", t.nranks, parts ? format(" and %d local experts", L).c_str() : "",
              bytes, kernel, kernels::kDynamicSharedBudget, parts ? " or fewer experts per rank" : ""));
}

}  // namespace

Plan make_plan(const GroupConfig& c, const Topology& topo) {
  check_topology(topo);
  const Topology t = with_virtual_nodes(topo, c.virtual_node_size);
  check_config_for_ranks(c, t.nranks);
  const bool ht = c.mode == EPC_MODE_HIGH_THROUGHPUT;
  const RingRequest rings = ht ? ht_rings_from_environment() : RingRequest{};
  // A window too large to plan at all (past kMaxWindowBytes, or staging the planner refuses
  // to sum) counts as past any budget while the part is chosen.
  auto window_bytes = [&](uint32_t part_tokens) {
    try {
      return plan_window(c, t, rings, part_tokens).symmetric_bytes;
    } catch (const Error& e) {
      if (e.status() != EPC_ERR_INVALID_ARGUMENT) throw;
      return std::numeric_limits<uint64_t>::max();
    }
  };
  const Plan plan = plan_window(c, t, rings, ht ? ht_part_tokens(c, t, window_bytes) : 0);
  if (plan.symmetric_bytes > kMaxWindowBytes) {
    fail_argument(format(
        "the window would need %llu bytes per rank, more than %llu; use fewer tokens, a smaller "
        "hidden, fewer ranks or larger nodes",
        static_cast<unsigned long long>(plan.symmetric_bytes), static_cast<unsigned long long>(kMaxWindowBytes)));
  }
  check_launch_shared(c, t, ht && plan.ht_part_tokens < c.max_tokens_per_rank);
  if (plan.regions.size() > EPC_PLAN_MAX_REGIONS) {
    fail(EPC_ERR_INTERNAL, format("plan has %zu regions, more than EPC_PLAN_MAX_REGIONS", plan.regions.size()));
  }
  return plan;
}

}  // namespace epc
