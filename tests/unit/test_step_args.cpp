// SPDX-License-Identifier: Apache-2.0
// The argument structs (ABI 2.0, 2.1's send_sms and 2.2's max_step_tokens) before any GPU work (core/step_args.cpp): EpcHandleConfig,
// EpcRouting, EpcDispatchArgs and EpcCombineArgs after the struct rules and defaults, and
// the status each misuse returns (UNSUPPORTED: defined but not served; INVALID_ARGUMENT:
// meaningless, missing or malformed; ABI_MISMATCH: a newer caller's non-zero tail), with a
// message naming the struct and the field.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/step_args.hpp"
#include "tests/unit/error_outcome.hpp"

namespace {

constexpr int kRanks = 4;

epc::GroupConfig group(EpcMode mode) {
  EpcGroupConfig raw = EPC_GROUP_CONFIG_INIT;
  raw.mode = mode;
  raw.num_experts = 64;
  raw.hidden = 2048;
  return epc::resolve_config(&raw);
}

// R * T: the default capacity of both served layouts.
uint64_t worst(EpcMode mode) { return kRanks * uint64_t{group(mode).max_tokens_per_rank}; }

using epc::test::expect_outcome;
using epc::test::Outcome;
using epc::test::run;

Outcome resolve(const EpcHandleConfig& c, EpcMode mode, epc::HandleSetup* out = nullptr) {
  return run([&] {
    epc::HandleSetup s = epc::resolve_handle_config(&c, group(mode), kRanks);
    if (out != nullptr) *out = s;
  });
}

EpcHandleConfig handle_config(EpcLayout layout, EpcSizing sizing = EPC_SIZING_CAPACITY) {
  EpcHandleConfig c = EPC_HANDLE_CONFIG_INIT;
  c.layout = layout;
  c.sizing = sizing;
  return c;
}

// ---- EpcHandleConfig -------------------------------------------------------------------

TEST(HandleConfig, NullGivesTheModesDefaults) {
  epc::HandleSetup ll = epc::resolve_handle_config(nullptr, group(EPC_MODE_LOW_LATENCY), kRanks);
  EXPECT_EQ(ll.layout, static_cast<EpcLayout>(EPC_LAYOUT_EXPERT_PADDED));
  EXPECT_EQ(ll.sizing, static_cast<EpcSizing>(EPC_SIZING_CAPACITY));
  EXPECT_EQ(ll.capacity, worst(EPC_MODE_LOW_LATENCY));
  EXPECT_EQ(ll.flags, 0u);
  epc::HandleSetup ht = epc::resolve_handle_config(nullptr, group(EPC_MODE_HIGH_THROUGHPUT), kRanks);
  EXPECT_EQ(ht.layout, static_cast<EpcLayout>(EPC_LAYOUT_FLAT));
  EXPECT_EQ(ht.sizing, static_cast<EpcSizing>(EPC_SIZING_CAPACITY));
  EXPECT_EQ(ht.capacity, worst(EPC_MODE_HIGH_THROUGHPUT));
  // EPC_HANDLE_CONFIG_INIT is the same as NULL.
  epc::HandleSetup init;
  ASSERT_EQ(resolve(EPC_HANDLE_CONFIG_INIT, EPC_MODE_LOW_LATENCY, &init).status, EPC_OK);
  EXPECT_EQ(init.layout, ll.layout);
  EXPECT_EQ(init.capacity, ll.capacity);
}

TEST(HandleConfig, LayoutsPerMode) {
  // LL serves EXPERT_PADDED, RANK_MAJOR and FLAT, HT serves FLAT and EXPERT_PACKED; the other
  // defined layouts are UNSUPPORTED.
  struct Case {
    EpcMode mode;
    EpcLayout layout;
    EpcStatus status;
  };
  const Case cases[] = {
      {EPC_MODE_LOW_LATENCY, EPC_LAYOUT_EXPERT_PADDED, EPC_OK},
      {EPC_MODE_LOW_LATENCY, EPC_LAYOUT_EXPERT_PACKED, EPC_ERR_UNSUPPORTED},
      {EPC_MODE_LOW_LATENCY, EPC_LAYOUT_RANK_MAJOR, EPC_OK},
      {EPC_MODE_LOW_LATENCY, EPC_LAYOUT_FLAT, EPC_OK},
      {EPC_MODE_HIGH_THROUGHPUT, EPC_LAYOUT_FLAT, EPC_OK},
      {EPC_MODE_HIGH_THROUGHPUT, EPC_LAYOUT_EXPERT_PADDED, EPC_ERR_UNSUPPORTED},
      {EPC_MODE_HIGH_THROUGHPUT, EPC_LAYOUT_EXPERT_PACKED, EPC_OK},
      {EPC_MODE_HIGH_THROUGHPUT, EPC_LAYOUT_RANK_MAJOR, EPC_ERR_UNSUPPORTED},
  };
  for (const Case& k : cases) {
    const std::string what = "mode " + std::to_string(k.mode) + " layout " + std::to_string(k.layout);
    const Outcome o = resolve(handle_config(k.layout), k.mode);
    if (k.status == EPC_OK) {
      EXPECT_EQ(o.status, EPC_OK) << what << ": " << o.message;
    } else {
      expect_outcome(o, k.status, {"EpcHandleConfig", "layout"}, what.c_str());
    }
  }
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    for (uint32_t unknown : {5u, 0xFFFFFFFFu}) {
      expect_outcome(resolve(handle_config(unknown), mode), EPC_ERR_INVALID_ARGUMENT, {"EpcHandleConfig", "layout"},
                     "unknown layout");
    }
  }
}

TEST(HandleConfig, Sizing) {
  epc::HandleSetup s;
  ASSERT_EQ(resolve(handle_config(EPC_LAYOUT_FLAT, EPC_SIZING_EXACT), EPC_MODE_HIGH_THROUGHPUT, &s).status, EPC_OK);
  EXPECT_EQ(s.sizing, static_cast<EpcSizing>(EPC_SIZING_EXACT));
  ASSERT_EQ(resolve(handle_config(EPC_LAYOUT_DEFAULT, EPC_SIZING_EXACT), EPC_MODE_HIGH_THROUGHPUT, &s).status, EPC_OK);
  // EXACT sizes [rows, ...] layouts: meaningless for the zoned ones, and that is checked
  // before the layout's UNSUPPORTED.
  expect_outcome(resolve(handle_config(EPC_LAYOUT_DEFAULT, EPC_SIZING_EXACT), EPC_MODE_LOW_LATENCY),
                 EPC_ERR_INVALID_ARGUMENT, {"EpcHandleConfig", "sizing"}, "EXACT on LL's EXPERT_PADDED");
  expect_outcome(resolve(handle_config(EPC_LAYOUT_EXPERT_PADDED, EPC_SIZING_EXACT), EPC_MODE_HIGH_THROUGHPUT),
                 EPC_ERR_INVALID_ARGUMENT, {"EpcHandleConfig", "sizing"}, "EXACT on EXPERT_PADDED (HT)");
  expect_outcome(resolve(handle_config(EPC_LAYOUT_RANK_MAJOR, EPC_SIZING_EXACT), EPC_MODE_HIGH_THROUGHPUT),
                 EPC_ERR_INVALID_ARGUMENT, {"EpcHandleConfig", "sizing"}, "EXACT on RANK_MAJOR");
  // EXACT on EXPERT_PACKED is served on HT groups.
  ASSERT_EQ(resolve(handle_config(EPC_LAYOUT_EXPERT_PACKED, EPC_SIZING_EXACT), EPC_MODE_HIGH_THROUGHPUT, &s).status,
            EPC_OK);
  EXPECT_EQ(s.layout, static_cast<EpcLayout>(EPC_LAYOUT_EXPERT_PACKED));
  EXPECT_EQ(s.sizing, static_cast<EpcSizing>(EPC_SIZING_EXACT));
  for (uint32_t unknown : {2u, 0xFFFFFFFFu}) {
    expect_outcome(resolve(handle_config(EPC_LAYOUT_DEFAULT, unknown), EPC_MODE_HIGH_THROUGHPUT),
                   EPC_ERR_INVALID_ARGUMENT, {"EpcHandleConfig", "sizing"}, "unknown sizing");
  }
}

TEST(HandleConfig, Capacity) {
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    EpcHandleConfig c = EPC_HANDLE_CONFIG_INIT;
    c.capacity = worst(mode);  // the default, spelled out
    epc::HandleSetup s;
    ASSERT_EQ(resolve(c, mode, &s).status, EPC_OK);
    EXPECT_EQ(s.capacity, worst(mode));
  }
  // LL zones hold R * T rows by construction.
  EpcHandleConfig c = EPC_HANDLE_CONFIG_INIT;
  for (uint64_t other : {worst(EPC_MODE_LOW_LATENCY) - 1, worst(EPC_MODE_LOW_LATENCY) + 1, uint64_t{1}, UINT64_MAX}) {
    c.capacity = other;
    expect_outcome(resolve(c, EPC_MODE_LOW_LATENCY), EPC_ERR_UNSUPPORTED, {"EpcHandleConfig", "capacity"},
                   "other LL capacity");
  }
  // HT FLAT: any row count up to the recv_capacity tokens that can arrive.
  for (uint64_t fewer : {worst(EPC_MODE_HIGH_THROUGHPUT) - 1, uint64_t{1}}) {
    c.capacity = fewer;
    epc::HandleSetup s;
    ASSERT_EQ(resolve(c, EPC_MODE_HIGH_THROUGHPUT, &s).status, EPC_OK);
    EXPECT_EQ(s.capacity, fewer);
  }
  for (uint64_t more : {worst(EPC_MODE_HIGH_THROUGHPUT) + 1, UINT64_MAX}) {
    c.capacity = more;
    expect_outcome(resolve(c, EPC_MODE_HIGH_THROUGHPUT), EPC_ERR_INVALID_ARGUMENT,
                   {"EpcHandleConfig", "capacity", "recv_capacity"}, "more rows than can arrive");
  }
  EpcHandleConfig exact = handle_config(EPC_LAYOUT_FLAT, EPC_SIZING_EXACT);
  exact.capacity = worst(EPC_MODE_HIGH_THROUGHPUT);
  expect_outcome(resolve(exact, EPC_MODE_HIGH_THROUGHPUT), EPC_ERR_INVALID_ARGUMENT, {"EpcHandleConfig", "capacity"},
                 "capacity with EXACT");
}

// LL token layouts hold every token that can arrive: R * T rows, no other capacity (FLAT:
// more is meaningless, fewer not served; RANK_MAJOR: its zones are fixed), no EXACT sizing.
TEST(HandleConfig, LowLatencyTokenLayoutsHoldRanksTimesMaxTokens) {
  const uint64_t rows = worst(EPC_MODE_LOW_LATENCY);
  for (EpcLayout layout : {EPC_LAYOUT_RANK_MAJOR, EPC_LAYOUT_FLAT}) {
    epc::HandleSetup s;
    ASSERT_EQ(resolve(handle_config(layout), EPC_MODE_LOW_LATENCY, &s).status, EPC_OK);
    EXPECT_EQ(s.layout, layout);
    EXPECT_EQ(s.capacity, rows);
  }
  EpcHandleConfig flat = handle_config(EPC_LAYOUT_FLAT);
  flat.capacity = rows;
  EXPECT_EQ(resolve(flat, EPC_MODE_LOW_LATENCY).status, EPC_OK);
  flat.capacity = rows - 1;
  expect_outcome(resolve(flat, EPC_MODE_LOW_LATENCY), EPC_ERR_UNSUPPORTED,
                 {"EpcHandleConfig", "capacity", "EPC_LAYOUT_FLAT"}, "LL FLAT below R * T");
  flat.capacity = rows + 1;
  expect_outcome(resolve(flat, EPC_MODE_LOW_LATENCY), EPC_ERR_INVALID_ARGUMENT,
                 {"EpcHandleConfig", "capacity", "ranks * max_tokens_per_rank"}, "LL FLAT above R * T");
  EpcHandleConfig rank_major = handle_config(EPC_LAYOUT_RANK_MAJOR);
  rank_major.capacity = rows;
  expect_outcome(resolve(rank_major, EPC_MODE_LOW_LATENCY), EPC_ERR_INVALID_ARGUMENT,
                 {"EpcHandleConfig", "capacity", "EPC_LAYOUT_RANK_MAJOR"}, "capacity on RANK_MAJOR");
  expect_outcome(resolve(handle_config(EPC_LAYOUT_FLAT, EPC_SIZING_EXACT), EPC_MODE_LOW_LATENCY), EPC_ERR_UNSUPPORTED,
                 {"EpcHandleConfig", "sizing", "EPC_SIZING_EXACT"}, "EXACT on LL FLAT");
  expect_outcome(resolve(handle_config(EPC_LAYOUT_RANK_MAJOR, EPC_SIZING_EXACT), EPC_MODE_LOW_LATENCY),
                 EPC_ERR_INVALID_ARGUMENT, {"EpcHandleConfig", "sizing"}, "EXACT on LL RANK_MAJOR");
  EpcHandleConfig global = handle_config(EPC_LAYOUT_FLAT);
  global.flags = EPC_HANDLE_GLOBAL_EXPERT_IDS;
  epc::HandleSetup s;
  ASSERT_EQ(resolve(global, EPC_MODE_LOW_LATENCY, &s).status, EPC_OK);
  EXPECT_EQ(s.flags, EPC_HANDLE_GLOBAL_EXPERT_IDS);
}

TEST(HandleConfig, FlatCapacityDefaultsToTheGroupsRecvCapacity) {
  EpcGroupConfig raw = EPC_GROUP_CONFIG_INIT;
  raw.mode = EPC_MODE_HIGH_THROUGHPUT;
  raw.num_experts = 64;
  raw.hidden = 2048;
  raw.recv_capacity = 1000;
  const epc::GroupConfig g = epc::resolve_config(&raw);
  EXPECT_EQ(epc::resolve_handle_config(nullptr, g, kRanks).capacity, 1000u);
  EpcHandleConfig c = EPC_HANDLE_CONFIG_INIT;
  c.capacity = 999;
  EXPECT_EQ(epc::resolve_handle_config(&c, g, kRanks).capacity, 999u);
  c.capacity = 1001;
  expect_outcome(run([&] { epc::resolve_handle_config(&c, g, kRanks); }), EPC_ERR_INVALID_ARGUMENT,
                 {"EpcHandleConfig", "capacity", "recv_capacity"}, "past the window");
  // EXPERT_PACKED is not served on such a group.
  c = handle_config(EPC_LAYOUT_EXPERT_PACKED);
  expect_outcome(run([&] { epc::resolve_handle_config(&c, g, kRanks); }), EPC_ERR_UNSUPPORTED,
                 {"EPC_LAYOUT_EXPERT_PACKED", "recv_capacity"}, "packed on a smaller window");
}

TEST(HandleConfig, ExpertAlignmentAndFlags) {
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    EpcHandleConfig c = EPC_HANDLE_CONFIG_INIT;
    c.expert_alignment = 16;
    expect_outcome(resolve(c, mode), EPC_ERR_INVALID_ARGUMENT, {"EpcHandleConfig", "expert_alignment"},
                   "expert_alignment outside EXPERT_PACKED");
    c = EPC_HANDLE_CONFIG_INIT;
    c.flags = EPC_HANDLE_GLOBAL_EXPERT_IDS;
    epc::HandleSetup s;
    ASSERT_EQ(resolve(c, mode, &s).status, EPC_OK);
    EXPECT_EQ(s.flags, static_cast<uint32_t>(EPC_HANDLE_GLOBAL_EXPERT_IDS));
    c.flags = EPC_HANDLE_ZERO_PADDING;
    expect_outcome(resolve(c, mode), EPC_ERR_INVALID_ARGUMENT, {"EpcHandleConfig", "flags"},
                   "ZERO_PADDING outside EXPERT_PACKED");
    for (uint32_t unknown : {0x4u, 0x80000000u}) {
      c.flags = unknown;
      expect_outcome(resolve(c, mode), EPC_ERR_INVALID_ARGUMENT, {"EpcHandleConfig", "flags"}, "unknown handle flag");
    }
  }
  // On EXPERT_PACKED (HT) both are served; LL does not serve the layout.
  EpcHandleConfig packed = handle_config(EPC_LAYOUT_EXPERT_PACKED);
  packed.expert_alignment = 128;
  packed.flags = EPC_HANDLE_ZERO_PADDING;
  epc::HandleSetup s;
  ASSERT_EQ(resolve(packed, EPC_MODE_HIGH_THROUGHPUT, &s).status, EPC_OK);
  EXPECT_EQ(s.expert_alignment, 128u);
  EXPECT_EQ(s.flags, static_cast<uint32_t>(EPC_HANDLE_ZERO_PADDING));
  expect_outcome(resolve(packed, EPC_MODE_LOW_LATENCY), EPC_ERR_UNSUPPORTED, {"EpcHandleConfig", "layout"},
                 "EXPERT_PACKED on LL");
  packed.expert_alignment = 0;  // 0 means 1
  ASSERT_EQ(resolve(packed, EPC_MODE_HIGH_THROUGHPUT, &s).status, EPC_OK);
  EXPECT_EQ(s.expert_alignment, 1u);
  packed.expert_alignment = 1u << 20;  // 16 zones of up to 2^20 padding rows each: served
  ASSERT_EQ(resolve(packed, EPC_MODE_HIGH_THROUGHPUT, &s).status, EPC_OK);
  // An alignment whose zones could pass the int32 rows kernels number is refused by name,
  // up to the largest value the field holds (which an int would read as negative).
  for (uint32_t huge : {1u << 28, 0x80000000u, 0xffffffffu}) {
    packed.expert_alignment = huge;
    expect_outcome(resolve(packed, EPC_MODE_HIGH_THROUGHPUT), EPC_ERR_INVALID_ARGUMENT,
                   {"EpcHandleConfig.expert_alignment", "2^31 - 1 rows"}, "a huge alignment");
  }
}

TEST(HandleConfig, ExpertPackedCapacityIsTheMostAlignedZonesCanTake) {
  // 4 ranks * T tokens of up to max_topk entries, over L zones of `alignment`.
  const epc::GroupConfig g = group(EPC_MODE_HIGH_THROUGHPUT);
  const uint64_t entries = worst(EPC_MODE_HIGH_THROUGHPUT) * g.max_topk;
  const uint64_t L = g.local_experts(kRanks);
  EXPECT_EQ(epc::ht_packed_worst_rows(entries, L, 0), entries);
  EXPECT_EQ(epc::ht_packed_worst_rows(5, 2, 4), 8u);
  EXPECT_EQ(epc::ht_packed_worst_rows(3, 8, 4), 12u);
  EXPECT_EQ(epc::ht_packed_worst_rows(0, 8, 4), 0u);
  EpcHandleConfig c = handle_config(EPC_LAYOUT_EXPERT_PACKED);
  c.expert_alignment = 128;
  epc::HandleSetup s;
  ASSERT_EQ(resolve(c, EPC_MODE_HIGH_THROUGHPUT, &s).status, EPC_OK);
  EXPECT_EQ(s.capacity, (entries + L * 127) / 128 * 128);
  c.capacity = s.capacity - 1;
  expect_outcome(resolve(c, EPC_MODE_HIGH_THROUGHPUT), EPC_ERR_UNSUPPORTED, {"EpcHandleConfig", "capacity"},
                 "EXPERT_PACKED capacity below the worst case");
}

// A caller's struct of `size` bytes: `value`'s first min(size, sizeof) bytes, then `tail`
// bytes past sizeof(T) up to size, then 0x5A (memory that is not the caller's) up to
// sizeof(T) when size is shorter.
template <typename T>
std::vector<unsigned char> caller_bytes(const T& value, size_t size, unsigned char tail = 0) {
  std::vector<unsigned char> bytes(size > sizeof(T) ? size : sizeof(T), 0x5A);
  std::memcpy(bytes.data(), &value, size < sizeof(T) ? size : sizeof(T));
  for (size_t i = sizeof(T); i < size; ++i) bytes[i] = tail;
  const uint32_t s = static_cast<uint32_t>(size);
  std::memcpy(bytes.data(), &s, sizeof s);
  return bytes;
}

template <typename T>
const T* as(const std::vector<unsigned char>& bytes) {
  return reinterpret_cast<const T*>(bytes.data());
}

TEST(HandleConfig, StructRules) {
  // An older caller whose struct ends before capacity: the bytes past its end (0x5A, an
  // unsupported capacity and bad flags if read) are not read; every field there defaults.
  const EpcHandleConfig c = EPC_HANDLE_CONFIG_INIT;
  auto short_bytes = caller_bytes(c, offsetof(EpcHandleConfig, capacity));
  epc::HandleSetup s;
  ASSERT_EQ(run([&] {
              s = epc::resolve_handle_config(as<EpcHandleConfig>(short_bytes), group(EPC_MODE_LOW_LATENCY), kRanks);
            }).status,
            EPC_OK);
  EXPECT_EQ(s.capacity, worst(EPC_MODE_LOW_LATENCY));
  EXPECT_EQ(s.flags, 0u);
  // A newer caller's longer struct: a zero tail is accepted, a non-zero one names the byte.
  auto zero_tail = caller_bytes(c, sizeof c + 16);
  EXPECT_EQ(run([&] {
              epc::resolve_handle_config(as<EpcHandleConfig>(zero_tail), group(EPC_MODE_LOW_LATENCY), kRanks);
            }).status,
            EPC_OK);
  auto nonzero_tail = caller_bytes(c, sizeof c + 16);
  nonzero_tail[sizeof c + 5] = 1;
  expect_outcome(
      run([&] { epc::resolve_handle_config(as<EpcHandleConfig>(nonzero_tail), group(EPC_MODE_LOW_LATENCY), kRanks); }),
      EPC_ERR_ABI_MISMATCH, {"EpcHandleConfig", ("byte " + std::to_string(sizeof c + 5)).c_str()}, "non-zero tail");
  EpcHandleConfig old_major = EPC_HANDLE_CONFIG_INIT;
  old_major.abi_version = 10300;
  expect_outcome(resolve(old_major, EPC_MODE_LOW_LATENCY), EPC_ERR_ABI_MISMATCH, {"EpcHandleConfig", "abi_version"},
                 "1.3 caller");
}

// ---- EpcRouting ------------------------------------------------------------------------

TEST(Routing, RequiredAndUnservedFields) {
  EpcTensor idx;
  std::memset(&idx, 0, sizeof idx);
  expect_outcome(run([] { epc::routing_tensor(nullptr); }), EPC_ERR_INVALID_ARGUMENT, {"EpcRouting"}, "NULL routing");
  EpcRouting r = EPC_ROUTING_INIT;
  expect_outcome(run([&] { epc::routing_tensor(&r); }), EPC_ERR_INVALID_ARGUMENT, {"EpcRouting.topk_idx"},
                 "no topk_idx");
  r.topk_idx = &idx;
  const EpcTensor* got = nullptr;
  ASSERT_EQ(run([&] { got = epc::routing_tensor(&r); }).status, EPC_OK);
  EXPECT_EQ(got, &idx);
  r.num_tokens = &idx;
  expect_outcome(run([&] { epc::routing_tensor(&r); }), EPC_ERR_UNSUPPORTED, {"EpcRouting.num_tokens"}, "num_tokens");
}

TEST(Routing, StructRules) {
  EpcTensor idx;
  std::memset(&idx, 0, sizeof idx);
  EpcRouting r = EPC_ROUTING_INIT;
  r.topk_idx = &idx;
  // Ends before num_tokens: the 0x5A bytes where it would be are not read.
  auto short_bytes = caller_bytes(r, offsetof(EpcRouting, num_tokens));
  const EpcTensor* got = nullptr;
  ASSERT_EQ(run([&] { got = epc::routing_tensor(as<EpcRouting>(short_bytes)); }).status, EPC_OK);
  EXPECT_EQ(got, &idx);
  auto zero_tail = caller_bytes(r, sizeof r + 8);
  EXPECT_EQ(run([&] { epc::routing_tensor(as<EpcRouting>(zero_tail)); }).status, EPC_OK);
  auto nonzero_tail = caller_bytes(r, sizeof r + 8, 0xFF);
  expect_outcome(run([&] { epc::routing_tensor(as<EpcRouting>(nonzero_tail)); }), EPC_ERR_ABI_MISMATCH,
                 {"EpcRouting", ("byte " + std::to_string(sizeof r)).c_str()}, "non-zero tail");
}

// ---- EpcDispatchArgs -------------------------------------------------------------------

struct Tensors {
  EpcTensor x{}, out_x{}, scales{}, weights{}, other{};
};

EpcDispatchArgs dispatch_args(Tensors& t) {
  EpcDispatchArgs a = EPC_DISPATCH_ARGS_INIT;
  a.x = &t.x;
  a.out_x = &t.out_x;
  return a;
}

Outcome read(const EpcDispatchArgs& a) {
  return run([&] { epc::read_dispatch_args(&a); });
}

TEST(DispatchArgs, RequiredFields) {
  Tensors t;
  expect_outcome(run([] { epc::read_dispatch_args(nullptr); }), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs"},
                 "NULL args");
  EXPECT_EQ(read(dispatch_args(t)).status, EPC_OK);
  EpcDispatchArgs a = dispatch_args(t);
  a.x = nullptr;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.x"}, "no x");
  a = dispatch_args(t);
  a.out_x = nullptr;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_x"}, "no out_x");
}

TEST(DispatchArgs, FlagsQuantAndScales) {
  Tensors t;
  EpcDispatchArgs a = dispatch_args(t);
  a.flags = EPC_STEP_SEND_ONLY;  // the mode decides whether it is served
  EXPECT_EQ(read(a).status, EPC_OK);
  a.flags = 0x4;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.flags"}, "unknown dispatch flag");
  a.flags = EPC_DISPATCH_POW2_SCALES;  // only with QUANT_FP8
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs", "POW2_SCALES"}, "POW2 without FP8");
  a.quant = EPC_QUANT_FP8;
  a.out_scales = &t.scales;
  EXPECT_EQ(read(a).status, EPC_OK);
  a.flags = 0;
  for (uint32_t block : {0u, 128u}) {
    a.scale_block = block;
    EXPECT_EQ(read(a).status, EPC_OK) << block;
  }
  a.scale_block = 64;
  expect_outcome(read(a), EPC_ERR_UNSUPPORTED, {"EpcDispatchArgs.scale_block"}, "scale_block 64");
  a.scale_block = 0;
  a.scale_layout = EPC_SCALES_SWIZZLED_128X4;
  expect_outcome(read(a), EPC_ERR_UNSUPPORTED, {"EpcDispatchArgs.scale_layout"}, "swizzled scales");
  a.scale_layout = 2;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.scale_layout"}, "unknown scale layout");

  a = dispatch_args(t);
  a.quant = EPC_QUANT_NVFP4;
  expect_outcome(read(a), EPC_ERR_UNSUPPORTED, {"EpcDispatchArgs.quant"}, "NVFP4");
  a.quant = 4;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.quant"}, "unknown quant");

  // With QUANT_NONE no scales travel.
  a = dispatch_args(t);
  a.scale_block = 128;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.scale_block"}, "scale_block with NONE");
  a = dispatch_args(t);
  a.out_scales = &t.scales;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_scales"}, "out_scales with NONE");
  // x_scales only with PASSTHROUGH; x_global_scale with NVFP4 and PASSTHROUGH (whose
  // payload check takes it with fp4 x only: core/passthrough.cpp).
  a = dispatch_args(t);
  a.x_scales = &t.scales;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.x_scales"}, "x_scales without PASSTHROUGH");
  a.quant = EPC_QUANT_PASSTHROUGH;
  a.out_scales = &t.scales;
  EXPECT_EQ(read(a).status, EPC_OK);
  // Passthrough copies whatever block its scales cover: MXFP8's 32 channels, NVFP4's 16.
  for (uint32_t block : {16u, 32u, 128u, 7u}) {
    a.scale_block = block;
    EXPECT_EQ(read(a).status, EPC_OK) << block;
  }
  a.scale_block = 0;
  a.x_global_scale = &t.other;
  EXPECT_EQ(read(a).status, EPC_OK);
  a = dispatch_args(t);
  a.x_global_scale = &t.other;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.x_global_scale"}, "global scale");
  a.quant = EPC_QUANT_FP8;
  a.out_scales = &t.scales;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.x_global_scale"}, "global scale with FP8");
  // out_topk_weights needs topk_weights.
  a = dispatch_args(t);
  a.out_topk_weights = &t.other;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.out_topk_weights"}, "weights out, none in");
  a.topk_weights = &t.weights;
  EXPECT_EQ(read(a).status, EPC_OK);
}

TEST(DispatchArgs, StructRules) {
  Tensors t;
  const EpcDispatchArgs a = dispatch_args(t);
  // An older caller's struct that ends before the outputs after out_x: the 0x5A bytes where
  // they would be (non-NULL pointers if read) are not read.
  auto short_bytes = caller_bytes(a, offsetof(EpcDispatchArgs, out_scales));
  EpcDispatchArgs got;
  ASSERT_EQ(run([&] { got = epc::read_dispatch_args(as<EpcDispatchArgs>(short_bytes)); }).status, EPC_OK);
  EXPECT_EQ(got.out_x, &t.out_x);
  EXPECT_EQ(got.out_scales, nullptr);
  EXPECT_EQ(got.acc_expert_counts, nullptr);
  auto zero_tail = caller_bytes(a, sizeof a + 8);
  EXPECT_EQ(run([&] { epc::read_dispatch_args(as<EpcDispatchArgs>(zero_tail)); }).status, EPC_OK);
  auto nonzero_tail = caller_bytes(a, sizeof a + 8);
  nonzero_tail[sizeof a + 7] = 1;
  expect_outcome(run([&] { epc::read_dispatch_args(as<EpcDispatchArgs>(nonzero_tail)); }), EPC_ERR_ABI_MISMATCH,
                 {"EpcDispatchArgs", ("byte " + std::to_string(sizeof a + 7)).c_str()}, "non-zero tail");
}

// What the library reads of `a` from an older caller whose struct ends after `size` bytes: the
// bytes behind them belong to something else (set in `a`) and must not be read.
EpcDispatchArgs read_older_caller(const EpcDispatchArgs& a, size_t size) {
  const auto old_bytes = caller_bytes(a, size);
  EpcDispatchArgs got{};
  EXPECT_EQ(run([&] { got = epc::read_dispatch_args(as<EpcDispatchArgs>(old_bytes)); }).status, EPC_OK) << size;
  return got;
}

// A 2.0 caller's EpcDispatchArgs (136 bytes: up to acc_expert_counts, capi/abi.json 2.0.0):
// the fields of 2.1 and later take their defaults.
TEST(DispatchArgs, A20StructGetsThe21Defaults) {
  Tensors t;
  EpcDispatchArgs a = dispatch_args(t);
  a.send_sms = 7;
  a.reserved0 = 9;
  constexpr size_t k20Size = offsetof(EpcDispatchArgs, acc_expert_counts) + sizeof(void*);
  static_assert(k20Size == 136 && offsetof(EpcDispatchArgs, send_sms) == k20Size, "2.0's size, then 2.1's field");
  const EpcDispatchArgs got = read_older_caller(a, k20Size);
  EXPECT_EQ(got.send_sms, 0u);
  EXPECT_EQ(got.reserved0, 0u);
  EXPECT_EQ(got.out_x, &t.out_x);
  // A 2.1 caller's reserved0 must be zero: a later minor may give it a meaning.
  a.send_sms = 0;
  EXPECT_EQ(read(a).status, EPC_ERR_ABI_MISMATCH);
  a.reserved0 = 0;
  a.send_sms = 7;  // checked against the group by each mode (resolve_send_sms)
  EXPECT_EQ(read(a).status, EPC_OK);
}

// A 2.1 caller's EpcDispatchArgs (144 bytes: up to reserved0, capi/abi.json 2.1.0): 2.2's
// max_step_tokens takes its default; a 2.2 caller's reserved1 must be zero.
TEST(DispatchArgs, A21StructGetsThe22Defaults) {
  Tensors t;
  EpcDispatchArgs a = dispatch_args(t);
  a.max_step_tokens = 5;
  a.reserved1 = 9;
  constexpr size_t k21Size = offsetof(EpcDispatchArgs, reserved0) + sizeof(uint32_t);
  static_assert(k21Size == 144 && offsetof(EpcDispatchArgs, max_step_tokens) == k21Size, "2.1's size, then 2.2's");
  const EpcDispatchArgs got = read_older_caller(a, k21Size);
  EXPECT_EQ(got.max_step_tokens, 0u);
  EXPECT_EQ(got.reserved1, 0u);
  EXPECT_EQ(got.out_x, &t.out_x);
  expect_outcome(read(a), EPC_ERR_ABI_MISMATCH, {"EpcDispatchArgs.reserved1"}, "a non-zero reserved1");
  a.reserved1 = 0;
  EXPECT_EQ(read(a).status, EPC_OK);  // max_step_tokens: checked by each mode (resolve_max_step_tokens)
}

// ---- What both modes check against the group -----------------------------------------------

// 0 is the group's max_tokens_per_rank; a bound must hold this rank's tokens and no more than
// the group's. Whether every rank passed the same bound only the kernels can tell.
TEST(MaxStepTokens, DefaultsToMaxTokensAndBoundsThisRanksTokens) {
  EXPECT_EQ(epc::resolve_max_step_tokens(0, 3, 128), 128);
  EXPECT_EQ(epc::resolve_max_step_tokens(0, 0, 128), 128);
  EXPECT_EQ(epc::resolve_max_step_tokens(3, 3, 128), 3);
  EXPECT_EQ(epc::resolve_max_step_tokens(4, 0, 128), 4);
  EXPECT_EQ(epc::resolve_max_step_tokens(128, 128, 128), 128);
  expect_outcome(run([] { epc::resolve_max_step_tokens(2, 3, 128); }), EPC_ERR_INVALID_ARGUMENT,
                 {"EpcDispatchArgs.max_step_tokens", "is 2", "dispatches 3 tokens"}, "below this rank's tokens");
  expect_outcome(run([] { epc::resolve_max_step_tokens(129, 3, 128); }), EPC_ERR_INVALID_ARGUMENT,
                 {"EpcDispatchArgs.max_step_tokens", "129", "max_tokens_per_rank (128)"}, "above max_tokens");
}

TEST(SendSms, DefaultsToNumSmsAndStaysWithinTheGroupAndTheGpu) {
  EXPECT_EQ(epc::resolve_send_sms(0, 24, 132, "EpcDispatchArgs.send_sms"), 24);
  EXPECT_EQ(epc::resolve_send_sms(1, 24, 132, "EpcDispatchArgs.send_sms"), 1);
  EXPECT_EQ(epc::resolve_send_sms(24, 24, 132, "EpcDispatchArgs.send_sms"), 24);
  expect_outcome(run([] { epc::resolve_send_sms(25, 24, 132, "EpcCombineArgs.send_sms"); }), EPC_ERR_INVALID_ARGUMENT,
                 {"EpcCombineArgs.send_sms", "25", "num_sms (24)"}, "above num_sms");
  EXPECT_EQ(epc::resolve_send_sms(132, 1024, 132, "EpcDispatchArgs.send_sms"), 132);
  expect_outcome(run([] { epc::resolve_send_sms(133, 1024, 132, "EpcDispatchArgs.send_sms"); }),
                 EPC_ERR_INVALID_ARGUMENT, {"EpcDispatchArgs.send_sms", "133", "132 SMs of the group's GPU"},
                 "above the GPU's SM count");
  // The default is the group's num_sms even where it exceeds the GPU (the launches then
  // queue their blocks in waves, as in 2.0).
  EXPECT_EQ(epc::resolve_send_sms(0, 1024, 132, "EpcDispatchArgs.send_sms"), 1024);
}

// On one GPU a group cannot span nodes (one rank is one node), so the refusal of HT
// send-only across nodes, virtual ones included, is checked here, where it is decided.
TEST(SendOnly, HighThroughputGroupsSpanningNodesNeedTheFusedLaunch) {
  EXPECT_EQ(run([] { epc::require_ht_split_served(1, "EpcDispatchArgs.flags"); }).status, EPC_OK);
  for (int nodes : {2, 4}) {
    expect_outcome(run([nodes] { epc::require_ht_split_served(nodes, "EpcCombineArgs.flags"); }), EPC_ERR_UNSUPPORTED,
                   {"EpcCombineArgs.flags", "EPC_STEP_SEND_ONLY", "spanning nodes", "virtual nodes included",
                    "fused launch is required"},
                   "send-only across nodes");
  }
}

// ---- EpcCombineArgs --------------------------------------------------------------------

EpcCombineArgs combine_args(Tensors& t) {
  EpcCombineArgs a = EPC_COMBINE_ARGS_INIT;
  a.x = &t.x;
  a.out = &t.out_x;
  return a;
}

Outcome read(const EpcCombineArgs& a) {
  return run([&] { epc::read_combine_args(&a); });
}

TEST(CombineArgs, FieldsThatDoNotDependOnTheMode) {
  Tensors t;
  expect_outcome(run([] { epc::read_combine_args(nullptr); }), EPC_ERR_INVALID_ARGUMENT, {"EpcCombineArgs"},
                 "NULL args");
  EXPECT_EQ(read(combine_args(t)).status, EPC_OK);
  EpcCombineArgs a = combine_args(t);
  a.x = nullptr;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcCombineArgs.x"}, "no x");
  a = combine_args(t);
  a.out = nullptr;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcCombineArgs.out"}, "no out");
  a = combine_args(t);
  a.flags = EPC_STEP_SEND_ONLY;
  EXPECT_EQ(read(a).status, EPC_OK);
  a.flags = 0x2;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcCombineArgs.flags"}, "unknown combine flag");
  a = combine_args(t);
  for (uint32_t w : {EPC_WEIGHTING_DEFAULT, EPC_WEIGHTING_NONE, EPC_WEIGHTING_SENDER}) {
    a.weighting = w;
    EXPECT_EQ(read(a).status, EPC_OK) << w;  // the mode and layout decide the rest
  }
  a.weighting = EPC_WEIGHTING_HOME;
  a.home_topk_weights = &t.weights;
  EXPECT_EQ(read(a).status, EPC_OK);
  a.home_topk_weights = nullptr;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcCombineArgs.home_topk_weights"}, "HOME without weights");
  a.weighting = 4;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcCombineArgs.weighting"}, "unknown weighting");
  // home_topk_weights only with WEIGHTING_HOME.
  a = combine_args(t);
  a.home_topk_weights = &t.weights;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcCombineArgs.home_topk_weights"}, "home weights, no HOME");
  // topk_weights and out_topk_weights: both or neither.
  a = combine_args(t);
  a.topk_weights = &t.weights;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcCombineArgs", "topk_weights"}, "weights without out");
  a.out_topk_weights = &t.other;
  EXPECT_EQ(read(a).status, EPC_OK);
  a.topk_weights = nullptr;
  expect_outcome(read(a), EPC_ERR_INVALID_ARGUMENT, {"EpcCombineArgs", "out_topk_weights"}, "out without weights");
}

// The weighting an HT combine runs (resolve_ht_weighting): defaults, and each refused
// combination's status with a message naming the field. HOME needs EXPERT_PACKED and a group
// with EPC_GROUP_COMBINE_PER_ENTRY (LL groups: LlOutputs.CombineXAndWeightingPerLayout).
TEST(CombineArgs, HighThroughputWeighting) {
  auto resolve = [](EpcWeighting w, EpcLayout layout, uint32_t flags) {
    EpcWeighting got = 99;
    Outcome o = run([&] { got = epc::resolve_ht_weighting(w, layout, flags); });
    return std::make_pair(o, got);
  };
  const uint32_t per_entry = EPC_GROUP_COMBINE_PER_ENTRY;
  for (uint32_t flags : {0u, per_entry}) {
    EXPECT_EQ(resolve(EPC_WEIGHTING_DEFAULT, EPC_LAYOUT_FLAT, flags).second, EPC_WEIGHTING_NONE);
    EXPECT_EQ(resolve(EPC_WEIGHTING_NONE, EPC_LAYOUT_FLAT, flags).second, EPC_WEIGHTING_NONE);
    EXPECT_EQ(resolve(EPC_WEIGHTING_DEFAULT, EPC_LAYOUT_EXPERT_PACKED, flags).second, EPC_WEIGHTING_SENDER);
    EXPECT_EQ(resolve(EPC_WEIGHTING_SENDER, EPC_LAYOUT_EXPERT_PACKED, flags).second, EPC_WEIGHTING_SENDER);
    EXPECT_EQ(resolve(EPC_WEIGHTING_NONE, EPC_LAYOUT_EXPERT_PACKED, flags).second, EPC_WEIGHTING_NONE);
    // FLAT has no expert rows to weight: meaningless there, with or without the flag.
    for (EpcWeighting w : {EPC_WEIGHTING_SENDER, EPC_WEIGHTING_HOME}) {
      expect_outcome(resolve(w, EPC_LAYOUT_FLAT, flags).first, EPC_ERR_INVALID_ARGUMENT,
                     {"EpcCombineArgs.weighting", "EPC_LAYOUT_FLAT"}, "SENDER or HOME on FLAT");
    }
  }
  EXPECT_EQ(resolve(EPC_WEIGHTING_HOME, EPC_LAYOUT_EXPERT_PACKED, per_entry).second, EPC_WEIGHTING_HOME);
  expect_outcome(resolve(EPC_WEIGHTING_HOME, EPC_LAYOUT_EXPERT_PACKED, 0).first, EPC_ERR_INVALID_ARGUMENT,
                 {"EpcCombineArgs.weighting", "EpcGroupConfig.flags", "EPC_GROUP_COMBINE_PER_ENTRY"},
                 "HOME without the per-entry window");
}

TEST(CombineArgs, StructRules) {
  Tensors t;
  const EpcCombineArgs a = combine_args(t);
  auto zero_tail = caller_bytes(a, sizeof a + 16);
  EXPECT_EQ(run([&] { epc::read_combine_args(as<EpcCombineArgs>(zero_tail)); }).status, EPC_OK);
  auto nonzero_tail = caller_bytes(a, sizeof a + 16);
  nonzero_tail[sizeof a] = 0x80;
  expect_outcome(run([&] { epc::read_combine_args(as<EpcCombineArgs>(nonzero_tail)); }), EPC_ERR_ABI_MISMATCH,
                 {"EpcCombineArgs", ("byte " + std::to_string(sizeof a)).c_str()}, "non-zero tail");
  // A struct that ends before out: out reads as NULL, which is required.
  auto short_bytes = caller_bytes(a, offsetof(EpcCombineArgs, out));
  expect_outcome(run([&] { epc::read_combine_args(as<EpcCombineArgs>(short_bytes)); }), EPC_ERR_INVALID_ARGUMENT,
                 {"EpcCombineArgs.out"}, "short struct without out");
  // A 2.0 caller's struct (56 bytes, up to out_topk_weights): 2.1's fields take defaults.
  EpcCombineArgs newer = combine_args(t);
  newer.send_sms = 3;
  newer.reserved0 = 5;
  constexpr size_t k20Size = offsetof(EpcCombineArgs, out_topk_weights) + sizeof(void*);
  static_assert(k20Size == 56 && offsetof(EpcCombineArgs, send_sms) == k20Size, "2.0's size, then 2.1's field");
  auto old_bytes = caller_bytes(newer, k20Size);
  EpcCombineArgs got;
  ASSERT_EQ(run([&] { got = epc::read_combine_args(as<EpcCombineArgs>(old_bytes)); }).status, EPC_OK);
  EXPECT_EQ(got.send_sms, 0u);
  EXPECT_EQ(got.reserved0, 0u);
  newer.send_sms = 0;
  expect_outcome(read(newer), EPC_ERR_ABI_MISMATCH, {"EpcCombineArgs.reserved0"}, "reserved0 non-zero");
}

}  // namespace
