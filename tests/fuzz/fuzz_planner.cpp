// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the configuration rules and the planner (core/config.cpp, core/planner.cpp).
//
// Input: an EpcGroupConfig's fields and a topology (nranks, lsa_size, num_nodes), each raw or
// picked from boundary values (fuzz_input.hpp). resolve_config + make_plan either throw
// epc::Error with an argument status and a message, or return a configuration inside every
// documented limit and a plan whose layout is sound: regions contiguous from offset 0,
// aligned, each at least as large as the format it holds needs (recomputed here with
// overflow-checked arithmetic), names that fit EpcPlanRegion.name, a window that covers
// them all, and across nodes a staging map whose rows are disjoint, aligned and no larger than
// the window mirror it replaced. With the dispatch and combine rings forced through the
// environment (core/ht/ht_rings.hpp, set from the input too, sometimes to garbage), the two
// receive regions hold exactly the rings, one node only. A receive capacity (HT, one node or
// several) sizes the dispatch window for that many slots. Anything else aborts.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/ht/ht_parts.hpp"
#include "core/ht/ht_rings.hpp"
#include "core/planner.hpp"
#include "core/topology.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/ht_message.hpp"
#include "kernels/wire/ll_message.hpp"
#include "kernels/wire/staging_map.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

using epc::fuzz::FuzzInput;

// Never called: resolve_config and the planner only look at whether they are set.
int32_t alloc_must_not_run(void*, size_t, void**) { std::abort(); }
void free_must_not_run(void*, void*) { std::abort(); }

const uint32_t kU32Values[] = {0,           1,
                               2,           3,
                               4,           7,
                               8,           16,
                               24,          32,
                               33,          64,
                               127,         128,
                               129,         132,
                               256,         1023,
                               1024,        1025,
                               2048,        2880,
                               4096,        7168,
                               65535,       65536,
                               65537,       (1u << 20) - 8,
                               1u << 20,    (1u << 20) + 8,
                               0x7FFFFFFFu, 0x80000000u,
                               0xFFFFFFFFu};
const int32_t kI32Values[] = {0, 1, 2, 3, 4, 8, 16, 72, 256, 65535, 65536, 65537, -1, INT32_MIN, INT32_MAX};

uint64_t mul(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  FUZZ_CHECK(!__builtin_mul_overflow(a, b, &out));
  return out;
}
uint64_t add(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  FUZZ_CHECK(!__builtin_add_overflow(a, b, &out));
  return out;
}

void check_config(const EpcGroupConfig& raw, const epc::GroupConfig& c) {
  namespace limits = epc::limits;
  const bool ll = c.mode == EPC_MODE_LOW_LATENCY;
  FUZZ_CHECK(c.mode == EPC_MODE_LOW_LATENCY || c.mode == EPC_MODE_HIGH_THROUGHPUT);
  FUZZ_CHECK(raw.mode == 0 || raw.mode == c.mode);
  FUZZ_CHECK(c.num_experts >= 1 && c.num_experts <= limits::kMaxExperts);
  FUZZ_CHECK(c.num_experts == raw.num_experts);
  FUZZ_CHECK(c.hidden >= 1 && c.hidden <= limits::kMaxHidden && c.hidden % limits::kHiddenMultiple == 0);
  FUZZ_CHECK(c.max_tokens_per_rank >= 1 &&
             c.max_tokens_per_rank <= uint32_t(ll ? limits::kMaxLlTokens : limits::kMaxHtTokens));
  FUZZ_CHECK(raw.max_tokens_per_rank == 0 || raw.max_tokens_per_rank == c.max_tokens_per_rank);
  FUZZ_CHECK(c.max_topk >= 1 && c.max_topk <= limits::kMaxTopk);
  FUZZ_CHECK(c.dtype == EPC_DTYPE_BF16 || c.dtype == EPC_DTYPE_FP16 || c.dtype == EPC_DTYPE_FP8_E4M3);
  FUZZ_CHECK(c.dtype != EPC_DTYPE_FP8_E4M3 || c.hidden % limits::kFp8BlockChannels == 0);
  // max_token_bytes picks the window: 0 or >= 2H the 16-bit one, [H + H/32, 2H) fp8 rows only.
  const uint64_t wide = uint64_t{c.hidden} * 2, narrow = uint64_t{c.hidden} + c.hidden / 32;
  FUZZ_CHECK((c.dtype == EPC_DTYPE_BF16) == (raw.max_token_bytes == 0 || raw.max_token_bytes >= wide));
  FUZZ_CHECK(c.dtype == EPC_DTYPE_BF16 || raw.max_token_bytes >= narrow);
  // LL rounds down to what its window holds; HT slots hold max_token_bytes itself (2.1).
  FUZZ_CHECK(c.token_bytes == (raw.max_token_bytes == 0 ? wide : raw.max_token_bytes));
  FUZZ_CHECK(ll || c.token_bytes <= uint64_t{c.hidden} * limits::kMaxTokenBytesPerChannel);
  FUZZ_CHECK(c.max_token_bytes() == (!ll ? c.token_bytes : c.dtype == EPC_DTYPE_BF16 ? wide : narrow));
  FUZZ_CHECK(c.max_pending_steps ==
             (raw.max_pending_steps == 0 ? limits::kDefaultPendingSteps : raw.max_pending_steps));
  FUZZ_CHECK(c.max_pending_steps <= limits::kMaxPendingSteps);
  FUZZ_CHECK(c.recv_capacity == raw.recv_capacity && c.overflow == EPC_OVERFLOW_FAIL);
  FUZZ_CHECK(c.num_sms >= 1 && c.num_sms <= limits::kMaxSms);
  FUZZ_CHECK(c.timeout_ms >= 1);
  // EPC_GROUP_COMBINE_PER_ENTRY, the one flag, in both modes and on any split (2.1).
  FUZZ_CHECK(c.flags == raw.flags && (raw.flags == 0 || raw.flags == EPC_GROUP_COMBINE_PER_ENTRY));
  FUZZ_CHECK(c.combine_slots_per_token() == (raw.flags != 0 ? c.max_topk : 1u));
  FUZZ_CHECK(c.virtual_node_size == raw.virtual_node_size);
  FUZZ_CHECK((c.alloc_fn == nullptr) == (c.free_fn == nullptr));
}

void check_region_names(const epc::Plan& plan) {
  for (const epc::Region& r : plan.regions) {
    FUZZ_CHECK(!r.name.empty());
    // EpcPlanRegion.name holds 31 characters and a NUL: longer names would reach callers cut.
    FUZZ_CHECK(r.name.size() < sizeof(EpcPlanRegion{}.name));
  }
}

// Ranks outside a node (LSA team or virtual node) get a staging region, the last one, laid
// out by the staging map (kernels/wire/staging_map.hpp): each staged array's rows lie inside
// one region before it, a writer's row is at most its stride, an array's part of each record
// lies inside the record (16-byte multiples), the rows of a block are 16-byte aligned,
// disjoint and inside it, the region holds exactly the blocks (up
// to its rounding), and it is never larger than the mirror of the whole span per remote rank
// it replaced. Low-latency messages are two arrays over the same rows, headers per
// destination and payloads staged once, whose parts tile each message; the region then holds
// one message header, count row, partial row (or entry rows, with EPC_GROUP_COMBINE_PER_ENTRY)
// and signal words per remote rank and one payload per token and slot, linear in the ranks.
void check_staging_map(const epc::GroupConfig& c, const epc::Topology& t, const epc::Plan& plan) {
  const epc::kernels::StagingMap& map = plan.staging_map;
  const uint64_t remote = static_cast<uint64_t>(t.remote_ranks());
  FUZZ_CHECK((map.count > 0) == (remote > 0));
  if (remote == 0) {
    FUZZ_CHECK(map.offset == 0 && map.bytes() == 0 && map.part_count == 0);
    return;
  }
  const epc::Region& r = plan.region(EPC_REGION_NET_STAGING);
  FUZZ_CHECK(&r == &plan.regions.back() && r.offset == map.offset);
  FUZZ_CHECK(map.remote_ranks == remote && map.remote_nodes == static_cast<uint32_t>(t.nodes() - 1));
  FUZZ_CHECK(map.node_size == static_cast<uint32_t>(t.node_size));
  FUZZ_CHECK(map.rank_block_bytes % 16 == 0 && map.rail_block_bytes % 16 == 0 && map.shared_block_bytes % 16 == 0);
  FUZZ_CHECK(r.size >= map.bytes() && r.size - map.bytes() < epc::kRegionAlignment);
  // map.bytes() <= remote * r.offset, without the product, which can pass 2^64 for the
  // largest windows the planner accepts.
  FUZZ_CHECK((map.bytes() + remote - 1) / remote <= r.offset);
  // HT: one more with EPC_GROUP_COMBINE_PER_ENTRY (the entries' rows, kHtCombineEntries).
  FUZZ_CHECK(map.count == (c.mode == EPC_MODE_LOW_LATENCY ? 1 + epc::kernels::kLlStagedArraysPerSlot * plan.num_slots
                                                          : 15u + (c.combine_slots_per_token() > 1 ? 1u : 0u)));
  FUZZ_CHECK(map.part_count ==
             (c.mode == EPC_MODE_LOW_LATENCY ? epc::kernels::kLlStagedPartsPerSlot * plan.num_slots : 0u));
  uint64_t end[3] = {0, 0, 0};  // where the previous row of a rank, rail, shared block ends
  const uint64_t block[3] = {map.rank_block_bytes, map.rail_block_bytes, map.shared_block_bytes};
  // Staged rows in the order the planner placed them: whole-row arrays and record parts
  // interleave in the rank blocks, so both lists are checked against one cursor per block.
  auto check_row = [&](const epc::kernels::StagedArray& a, uint64_t staged_bytes) {
    const uint64_t rows =
        a.row_of == epc::kernels::RowOf::kNode ? static_cast<uint64_t>(t.nodes()) : static_cast<uint64_t>(t.nranks);
    FUZZ_CHECK(a.row_bytes > 0 && a.row_bytes <= a.row_stride);
    const epc::Region* holder = nullptr;
    for (const epc::Region& region : plan.regions) {
      if (a.offset >= region.offset && a.offset < region.offset + region.size) holder = &region;
    }
    FUZZ_CHECK(holder != nullptr && holder->kind != EPC_REGION_NET_STAGING);
    FUZZ_CHECK(add(a.offset, mul(rows, a.row_stride)) <= holder->offset + holder->size);
    const size_t kind = static_cast<size_t>(a.staged_for);
    FUZZ_CHECK(kind < 3);
    FUZZ_CHECK(a.staged % 16 == 0);
    end[kind] = std::max(end[kind], add(a.staged, staged_bytes));
    FUZZ_CHECK(end[kind] <= block[kind]);
    FUZZ_CHECK(map.array(a.name, a.slot) == &a);
  };
  // Disjoint staged rows: sorted by place within each block kind.
  struct Placed {
    size_t kind;
    uint64_t begin, end;
  };
  std::vector<Placed> placed;
  for (uint32_t i = 0; i < map.count; ++i) {
    const epc::kernels::StagedArray& a = map.arrays[i];
    FUZZ_CHECK(a.staged_for != epc::kernels::StagedFor::kOnceForRemoteRanks);  // whole rows go per destination
    check_row(a, a.row_bytes);
    placed.push_back({static_cast<size_t>(a.staged_for), a.staged, a.staged + a.row_bytes});
  }
  for (uint32_t i = 0; i < map.part_count; ++i) {
    const epc::kernels::StagedParts& p = map.parts[i];
    FUZZ_CHECK(p.record_stride > 0 && p.rows.row_bytes % p.record_stride == 0 && p.record_stride % 16 == 0);
    FUZZ_CHECK(p.part_bytes > 0 && p.part_bytes % 16 == 0 && add(p.part_begin, p.part_bytes) <= p.record_stride);
    FUZZ_CHECK(p.rows.row_bytes < epc::kernels::kMaxStagedRecordRowBytes);
    check_row(p.rows, p.staged_bytes());
    FUZZ_CHECK(map.parts_of(p.rows.name, p.rows.slot) == &p);
    placed.push_back({static_cast<size_t>(p.rows.staged_for), p.rows.staged, p.rows.staged + p.staged_bytes()});
    // Only low-latency payloads are staged once.
    FUZZ_CHECK((p.rows.staged_for == epc::kernels::StagedFor::kOnceForRemoteRanks) ==
               (p.rows.name == epc::kernels::Staged::kLlMessagePayloads));
    if (p.rows.name != epc::kernels::Staged::kLlMessagePayloads) continue;
    // A message is its header, staged per destination, and its payload, staged once: the
    // two parts tile it.
    const epc::kernels::StagedParts* headers = map.parts_of(epc::kernels::Staged::kLlMessageHeaders, p.rows.slot);
    FUZZ_CHECK(headers != nullptr && headers->rows.offset == p.rows.offset);
    FUZZ_CHECK(headers->rows.row_bytes == p.rows.row_bytes && headers->record_stride == p.record_stride);
    FUZZ_CHECK(p.record_stride == plan.message_bytes && p.records() == c.max_tokens_per_rank);
    FUZZ_CHECK(headers->part_begin == 0 && headers->part_bytes == epc::ll_message_header_bytes(c));
    FUZZ_CHECK(p.part_begin == headers->part_bytes && p.part_begin + p.part_bytes == p.record_stride);
    // The lookup: the first payload byte of rank 0's last token, bound for the first and the
    // last rank outside its node, is one staged byte; its header's first byte two.
    const int first = t.node_size, last = t.nranks - 1;
    const uint64_t message = p.rows.writer_row(0, 0) + mul(c.max_tokens_per_rank - 1, p.record_stride);
    const uint64_t payload = add(message, p.part_begin);
    FUZZ_CHECK(map.staged_offset(payload, 0, first) != epc::kernels::kNotStaged);
    FUZZ_CHECK(map.staged_offset(payload, 0, first) == map.staged_offset(payload, 0, last));
    FUZZ_CHECK(map.staged_row_offset(payload, 0, first) == epc::kernels::kNotStaged);
    FUZZ_CHECK(first == last || map.staged_offset(message, 0, first) != map.staged_offset(message, 0, last));
  }
  std::sort(placed.begin(), placed.end(),
            [](const Placed& a, const Placed& b) { return a.kind != b.kind ? a.kind < b.kind : a.begin < b.begin; });
  for (size_t i = 1; i < placed.size(); ++i) {
    if (placed[i].kind == placed[i - 1].kind) FUZZ_CHECK(placed[i].begin >= placed[i - 1].end);
  }
  for (size_t k = 0; k < 3; ++k) FUZZ_CHECK(block[k] == (end[k] + 15) / 16 * 16);
  if (c.mode == EPC_MODE_LOW_LATENCY) {
    // Linear in the ranks: per remote rank everything but the payloads, which are staged
    // once per (slot, token), never per destination.
    const uint64_t header = epc::ll_message_header_bytes(c);
    const uint64_t payload = plan.message_bytes - header;
    FUZZ_CHECK(map.shared_block_bytes == mul(mul(plan.num_slots, c.max_tokens_per_rank), payload));
    // The combine row: a partial per token, or with EPC_GROUP_COMBINE_PER_ENTRY the token's
    // max_entries entry rows, staged whole (ll_combine_home.cuh writes a message's rows
    // through one lookup).
    const uint64_t combine_row = mul(epc::ll_combine_rows_per_token(c), mul(c.hidden, 2));
    for (uint32_t s = 0; s < plan.num_slots; ++s) {
      const epc::kernels::StagedArray* rows = map.array(epc::kernels::Staged::kLlCombineRows, s);
      FUZZ_CHECK(rows != nullptr && rows->offset == plan.region(EPC_REGION_COMBINE_RECV, s).offset);
      FUZZ_CHECK(rows->row_bytes == mul(c.max_tokens_per_rank, combine_row) && rows->row_stride == rows->row_bytes);
    }
    const uint64_t per_slot = add(mul(c.max_tokens_per_rank, add(header, combine_row)),
                                  add(mul(c.num_experts / static_cast<uint64_t>(t.nranks), 4), 64));
    FUZZ_CHECK(map.rank_block_bytes <= add(mul(plan.num_slots, per_slot), 16));
  }
}

// Rings fill `region` exactly (up to its rounding) from its start, in a group of one node of at
// most kHtRingMaxNodeSize ranks; each ring's last slot ends inside the area.
void check_rings(const epc::kernels::HtRingArea& a, const epc::Region& region, const epc::Topology& nodes,
                 uint32_t slot_bytes) {
  FUZZ_CHECK(nodes.nodes() == 1 && nodes.node_size <= epc::kernels::kHtRingMaxNodeSize);
  FUZZ_CHECK(a.base == region.offset && a.node_size == static_cast<uint32_t>(nodes.node_size));
  FUZZ_CHECK(a.capacity >= 1 && a.capacity <= epc::kMaxRingSlots);
  FUZZ_CHECK(a.channels >= 1 && a.channels <= epc::kMaxRingChannels);
  FUZZ_CHECK(a.slot_bytes == add(slot_bytes, sizeof(epc::kernels::HtRingHeader)) && a.slot_bytes % 16 == 0);
  FUZZ_CHECK(region.size >= a.bytes() && region.size - a.bytes() < epc::kRegionAlignment);
  const int last_ring = static_cast<int>(a.node_size) - 1, last_channel = static_cast<int>(a.channels) - 1;
  FUZZ_CHECK(add(a.slots(last_ring, last_channel), mul(a.capacity, a.slot_bytes)) == add(a.base, a.bytes()));
  FUZZ_CHECK(add(a.reader_state(last_ring, last_channel), 16) <= a.slots(0, 0));
}

// The ring variables for one input: set from it (a count, sometimes text that is not one),
// unset again when the input is done.
class RingEnvironment {
 public:
  explicit RingEnvironment(FuzzInput& in) {
    const uint8_t how = in.byte();
    if ((how & 1) == 0) return;
    static const char* const kTexts[] = {"0", "1", "2", "3", "7", "64", "65", "1024", "1025", "", "x", "-1", "2x"};
    const size_t n = sizeof kTexts / sizeof kTexts[0];
    setenv("EPCOMM_HT_RING_SLOTS", kTexts[(how >> 1) % n], 1);
    if ((how & 0x80) != 0) setenv("EPCOMM_HT_RING_CHANNELS", kTexts[in.byte() % n], 1);
  }
  ~RingEnvironment() {
    unsetenv("EPCOMM_HT_RING_SLOTS");
    unsetenv("EPCOMM_HT_RING_CHANNELS");
  }
  RingEnvironment(const RingEnvironment&) = delete;
  RingEnvironment& operator=(const RingEnvironment&) = delete;
};

void check_layout(const epc::GroupConfig& c, const epc::Topology& t, const epc::Plan& plan) {
  FUZZ_CHECK(!plan.regions.empty() && plan.regions.size() <= EPC_PLAN_MAX_REGIONS);
  FUZZ_CHECK(plan.regions[0].kind == EPC_REGION_CONTROL && plan.regions[0].offset == 0);
  uint64_t end = 0;
  for (const epc::Region& r : plan.regions) {
    FUZZ_CHECK(r.offset == end);  // contiguous, in order, no overlap
    FUZZ_CHECK(r.offset % epc::kRegionAlignment == 0 && r.size % epc::kRegionAlignment == 0);
    FUZZ_CHECK(r.size > 0);
    end = add(r.offset, r.size);
  }
  FUZZ_CHECK(plan.symmetric_bytes >= end);
  FUZZ_CHECK(plan.symmetric_bytes % epc::kWindowAlignment == 0);
  FUZZ_CHECK(plan.symmetric_bytes - end < epc::kWindowAlignment);
  check_region_names(plan);

  const uint64_t R = static_cast<uint64_t>(t.nranks);
  const uint64_t T = c.max_tokens_per_rank;
  const uint64_t L = c.num_experts / R;
  FUZZ_CHECK(L >= 1 && L * R == c.num_experts);
  FUZZ_CHECK(plan.region(EPC_REGION_CONTROL).size >= mul(static_cast<uint64_t>(t.nranks), sizeof(uint64_t)));
  FUZZ_CHECK(plan.mode == c.mode && plan.num_sms == c.num_sms);
  FUZZ_CHECK(plan.max_token_bytes == c.max_token_bytes() && plan.max_pending_steps == c.max_pending_steps);
  FUZZ_CHECK(c.mode != EPC_MODE_LOW_LATENCY || plan.num_slots == (c.max_pending_steps > 2 ? c.max_pending_steps : 2u));
  // recv_capacity: R * T by default; below it on HT groups only (2.1: one node or several).
  FUZZ_CHECK(plan.recv_capacity == (c.recv_capacity == 0 ? mul(R, T) : c.recv_capacity));
  FUZZ_CHECK(plan.recv_capacity >= 1 && plan.recv_capacity <= mul(R, T) && plan.handle_bytes > 0);
  FUZZ_CHECK(c.mode == EPC_MODE_HIGH_THROUGHPUT || plan.recv_capacity == mul(R, T));
  FUZZ_CHECK(plan.lsa_barriers == 0);
  FUZZ_CHECK((t.num_nodes > 1) == (plan.gin_contexts > 0));
  const epc::Topology nodes = epc::with_virtual_nodes(t, c.virtual_node_size);
  const size_t staging = nodes.nodes() > 1 ? 1 : 0;
  check_staging_map(c, nodes, plan);
  if (c.mode == EPC_MODE_LOW_LATENCY) {
    FUZZ_CHECK(plan.ht_dispatch_rings.capacity == 0 && plan.ht_combine_rings.capacity == 0);
    FUZZ_CHECK(plan.num_slots == 2 && plan.regions.size() == 9 + staging);
    const uint64_t row = c.dtype == EPC_DTYPE_FP8_E4M3 ? add(c.hidden, c.hidden / 128 * 4) : mul(c.hidden, 2);
    const uint64_t header = epc::kernels::ll_message_header_bytes(c.max_topk);
    // The kernels address messages with the 32-bit plan.message_bytes and move payloads in
    // 16-byte vectors (int4) from message + header: a message holds header and payload, and
    // every message starts 16-byte aligned.
    const uint64_t needed = add(header, row);
    FUZZ_CHECK(plan.message_bytes >= needed && plan.message_bytes - needed < 16);
    FUZZ_CHECK(plan.message_bytes % 16 == 0);
    FUZZ_CHECK(epc::ll_message_header_bytes(c) == header);
    for (uint32_t s = 0; s < 2; ++s) {
      const uint64_t messages = mul(mul(R, T), plan.message_bytes);
      // Then, where a step may be a line step, twice a message per line record of its largest
      // line step and 8 bytes per count as a line word; a line group's every step is one.
      const int line_steps =
          epc::kernels::ll_dispatch_line_steps(static_cast<int>(plan.ll_line_tokens), plan.message_bytes);
      FUZZ_CHECK(line_steps >= 0 && static_cast<uint32_t>(line_steps) <= plan.ll_line_tokens);
      FUZZ_CHECK(static_cast<uint64_t>(line_steps) * plan.message_bytes <= epc::kernels::kLlLineGroupBytes);
      const uint64_t lines =
          line_steps > 0 ? add(mul(mul(R, line_steps), mul(plan.message_bytes, 2)), mul(mul(R, L), 8)) : 0;
      FUZZ_CHECK(plan.region(EPC_REGION_DISPATCH_RECV, s).size >= add(add(messages, mul(mul(R, L), 4)), lines));
      FUZZ_CHECK(plan.region(EPC_REGION_DISPATCH_SIGNAL, s).size >= mul(R, 8));
      // A row per (token, message entry) with EPC_GROUP_COMBINE_PER_ENTRY, on any split; then
      // two rows per line record.
      FUZZ_CHECK(plan.region(EPC_REGION_COMBINE_RECV, s).size >=
                 add(mul(mul(mul(R, T), epc::ll_combine_rows_per_token(c)), mul(c.hidden, 2)),
                     mul(mul(R, plan.ll_line_tokens), mul(c.hidden, 4))));
      FUZZ_CHECK(plan.region(EPC_REGION_COMBINE_SIGNAL, s).size >= mul(R, 8));
    }
    FUZZ_CHECK(plan.workspace_bytes == 256);
    // Line records: a prefix of a source's messages, on one node, for one partial per message.
    FUZZ_CHECK(plan.ll_line_tokens <= T);
    FUZZ_CHECK(plan.ll_line_tokens == 0 || (nodes.nodes() == 1 && epc::ll_combine_rows_per_token(c) == 1));
  } else {
    // Steps across nodes run in parts of P tokens per rank (core/ht/ht_parts.hpp), the
    // window holding one part: only across nodes, only at the worst case's recv_capacity
    // (0, or R * T given as such).
    const uint64_t P = plan.ht_part_tokens;
    FUZZ_CHECK(P >= 1 && P <= T);
    FUZZ_CHECK(P == T || (nodes.nodes() > 1 && plan.recv_capacity == mul(R, T)));
    const epc::GroupConfig part = epc::ht_part_config(c, plan.ht_part_tokens);
    FUZZ_CHECK(part.max_tokens_per_rank == P);
    FUZZ_CHECK(uint64_t{epc::ht_parts(c, plan.ht_part_tokens)} * P >= T);
    const uint64_t window_rows = P == T ? plan.recv_capacity : mul(R, P);
    const size_t rail = nodes.nodes() > 1 ? 2 : 0;  // rail_recv, rail_signal
    FUZZ_CHECK(plan.num_slots == 1 && plan.regions.size() == 7 + rail + staging);
    if (rail > 0) {
      const auto slot = epc::kernels::ht_rail_slot(
          epc::kernels::ht_dispatch_slot(c.hidden, c.dtype == EPC_DTYPE_FP8_E4M3 ? 1 : 2, c.max_topk, c.token_bytes),
          static_cast<uint32_t>(nodes.node_size), c.max_topk);
      const uint64_t places = epc::kernels::ht_rail_positions_offset(slot, static_cast<uint32_t>(nodes.node_size));
      FUZZ_CHECK(slot.rows_offset % 16 == 0 && places % 16 == 0 &&
                 places >= slot.rows_offset + 4 * static_cast<uint64_t>(nodes.node_size) &&
                 slot.bytes >= places + 4 * static_cast<uint64_t>(c.max_topk));
      const uint64_t M = static_cast<uint64_t>(nodes.nodes());
      FUZZ_CHECK(plan.region(EPC_REGION_RAIL_RECV).size >= mul(mul(M, P), slot.bytes));
      FUZZ_CHECK(plan.region(EPC_REGION_RAIL_SIGNAL).size >=
                 mul(mul(M, static_cast<uint64_t>(epc::kernels::ht_chunks(static_cast<int>(P)))), 8));
    }
    const auto dispatch =
        epc::kernels::ht_dispatch_slot(c.hidden, c.dtype == EPC_DTYPE_FP8_E4M3 ? 1 : 2, c.max_topk, c.token_bytes);
    const auto combine = epc::kernels::ht_combine_slot(c.hidden, c.max_topk);
    // The slot formats, recomputed in 64 bits: the 32-bit offsets the kernels use are exact.
    const uint64_t element = c.dtype == EPC_DTYPE_FP8_E4M3 ? 1 : 2;
    const uint64_t row = (mul(c.hidden, element) + 15) / 16 * 16;
    const uint64_t scales = (mul((c.hidden + 127) / 128, 4) + 15) / 16 * 16;
    const uint64_t topk = (mul(c.max_topk, 4) + 15) / 16 * 16;
    // The payload area: 2.0's row and fp32 scales, or max_token_bytes rounded up to 16 where
    // larger; any row (a multiple of 16) plus scales up to max_token_bytes fits.
    const uint64_t payload = std::max<uint64_t>(row + scales, (uint64_t{c.token_bytes} + 15) / 16 * 16);
    FUZZ_CHECK(dispatch.topk_offset == payload && payload >= uint64_t{c.token_bytes});
    FUZZ_CHECK(dispatch.weights_offset == payload + topk && dispatch.bytes == payload + 2 * topk);
    // 2.0's sizes are unchanged: the default and the fp8 window keep 2.0's area.
    if (c.token_bytes == mul(c.hidden, 2) || (c.hidden % 128 == 0 && c.token_bytes == c.hidden + c.hidden / 32)) {
      FUZZ_CHECK(payload == row + scales);
    }
    FUZZ_CHECK(combine.weights_offset == mul(c.hidden, 2) && combine.bytes == mul(c.hidden, 2) + topk);
    FUZZ_CHECK(plan.message_bytes == dispatch.bytes);
    for (uint32_t s = 0; s < epc::kHtLayoutSlots; ++s) {
      const uint64_t words = mul(mul(R, epc::kernels::kHtLayoutHeaderWords + L), 4);
      FUZZ_CHECK(epc::ht_layout_words_offset(t.nranks) >= mul(R, 8));
      FUZZ_CHECK(plan.region(EPC_REGION_LAYOUT, s).size >= add(epc::ht_layout_words_offset(t.nranks), words));
    }
    const uint64_t chunks = static_cast<uint64_t>(epc::kernels::ht_chunks(static_cast<int>(P)));
    FUZZ_CHECK(chunks * epc::kernels::kHtChunkTokens >= P);
    FUZZ_CHECK(epc::ht_acks_offset(part, t.nranks) == mul(mul(R, chunks), 8));
    FUZZ_CHECK(epc::ht_signal_bytes(part, t.nranks) == add(epc::ht_acks_offset(part, t.nranks), mul(R, 8)));
    const epc::kernels::HtRingArea& dispatch_rings = plan.ht_dispatch_rings;
    const epc::kernels::HtRingArea& combine_rings = plan.ht_combine_rings;
    FUZZ_CHECK((dispatch_rings.capacity > 0) == (combine_rings.capacity > 0));
    if (dispatch_rings.capacity > 0) {
      check_rings(dispatch_rings, plan.region(EPC_REGION_DISPATCH_RECV), nodes, dispatch.bytes);
      check_rings(combine_rings, plan.region(EPC_REGION_COMBINE_RECV), nodes, combine.bytes);
    } else {
      // recv_capacity slots: [R][T] at R * T, compact below (kernels/wire/ht_capacity.hpp);
      // [R][P] in parts.
      const epc::Region& window = plan.region(EPC_REGION_DISPATCH_RECV);
      FUZZ_CHECK(window.size >= mul(window_rows, dispatch.bytes));
      FUZZ_CHECK(window.size - mul(window_rows, dispatch.bytes) < epc::kRegionAlignment);
      // One slot per (token, top-k entry) with EPC_GROUP_COMBINE_PER_ENTRY, any split.
      FUZZ_CHECK(plan.region(EPC_REGION_COMBINE_RECV).size >=
                 mul(mul(mul(R, P), c.combine_slots_per_token()), combine.bytes));
    }
    FUZZ_CHECK(plan.region(EPC_REGION_DISPATCH_SIGNAL).size >= epc::ht_signal_bytes(part, t.nranks));
    FUZZ_CHECK(plan.region(EPC_REGION_COMBINE_SIGNAL).size >= epc::ht_signal_bytes(part, t.nranks));
    FUZZ_CHECK(plan.workspace_bytes == 256);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  EpcGroupConfig raw = EPC_GROUP_CONFIG_INIT;
  raw.mode = in.pick(kU32Values);
  raw.num_experts = in.pick(kU32Values);
  raw.hidden = in.pick(kU32Values);
  raw.max_tokens_per_rank = in.pick(kU32Values);
  raw.max_topk = in.pick(kU32Values);
  raw.max_token_bytes = in.pick(kU32Values);
  raw.num_sms = in.pick(kU32Values);
  raw.timeout_ms = in.pick(kU32Values);
  const uint8_t extras = in.byte();
  if (extras & 1) raw.flags = in.raw<uint32_t>();
  if (extras & 2) raw.virtual_node_size = in.pick(kU32Values);
  if (extras & 4) raw.alloc_fn = &alloc_must_not_run;
  if (extras & 8) raw.free_fn = &free_must_not_run;
  epc::Topology topo;
  if (extras & 32) raw.recv_capacity = in.pick(kU32Values);  // often below R * T, sometimes above
  if (extras & 16) {                                         // any three numbers
    topo.nranks = in.pick(kI32Values);
    topo.lsa_size = in.pick(kI32Values);
    topo.num_nodes = in.pick(kI32Values);
  } else {  // a consistent machine: num_nodes teams of lsa_size ranks
    topo.lsa_size = 1 + in.byte() % 72;
    topo.num_nodes = 1 + in.byte() % 16;
    topo.nranks = topo.lsa_size * topo.num_nodes;
  }

  const RingEnvironment rings(in);
  try {
    const epc::GroupConfig c = epc::resolve_config(&raw);
    check_config(raw, c);
    const epc::Plan plan = epc::make_plan(c, topo);
    FUZZ_CHECK(topo.nranks >= 1 && topo.nranks <= epc::kMaxRanks);
    FUZZ_CHECK(topo.lsa_size >= 1 && static_cast<int64_t>(topo.lsa_size) * topo.num_nodes == topo.nranks);
    check_layout(c, topo, plan);
    // Pure: the same input plans the same layout again.
    const epc::Plan again = epc::make_plan(epc::resolve_config(&raw), topo);
    FUZZ_CHECK(again.symmetric_bytes == plan.symmetric_bytes && again.regions.size() == plan.regions.size());
  } catch (const epc::Error& e) {
    FUZZ_CHECK(e.status() == EPC_ERR_INVALID_ARGUMENT || e.status() == EPC_ERR_UNSUPPORTED);
    FUZZ_CHECK(std::strlen(e.what()) > 0);
  }
  return 0;
}
