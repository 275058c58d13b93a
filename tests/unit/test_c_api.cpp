// SPDX-License-Identifier: Apache-2.0
// The C ABI's behaviour on bad input, through the real shared library: a specific status,
// a message naming the struct and the field, out-parameters untouched, never a crash. None
// of these calls needs a GPU: the plan query is pure CPU, and every other call refuses a
// NULL or dead object before it would touch one.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "epcomm/epcomm.h"
#include "tests/harness/scoped_env.hpp"

namespace {

std::string last_error() {
  size_t length = 0;
  EXPECT_EQ(epc_last_error(nullptr, 0, &length), EPC_OK);
  std::string text(length + 1, '\0');
  EXPECT_EQ(epc_last_error(&text[0], text.size(), nullptr), EPC_OK);
  text.resize(length);
  return text;
}

bool mentions(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

constexpr uint32_t kExperts = 64;
constexpr uint32_t kHidden = 2048;
constexpr int kRanks = 4;
// The header's defaults for T: 128 (LL), 4096 (HT).
constexpr uint64_t kLlTokens = 128;
constexpr uint64_t kHtTokens = 4096;

EpcGroupConfig valid_config(EpcMode mode = EPC_MODE_LOW_LATENCY) {
  EpcGroupConfig c = EPC_GROUP_CONFIG_INIT;
  c.mode = mode;
  c.num_experts = kExperts;
  c.hidden = kHidden;
  return c;
}

// An EpcPlan whose every byte past the header is 0xAB, to see what a call wrote.
EpcPlan poisoned_plan() {
  EpcPlan p;
  std::memset(&p, 0xAB, sizeof p);
  p.struct_size = sizeof p;
  p.abi_version = EPC_ABI_VERSION;
  return p;
}

EpcPlan plan_of(const EpcGroupConfig& c, int nranks = kRanks) {
  EpcPlan plan = EPC_PLAN_INIT;
  EXPECT_EQ(epc_plan_query(&c, nranks, nranks, 1, &plan), EPC_OK) << last_error();
  return plan;
}

const EpcPlanRegion& find_region(const EpcPlan& plan, EpcRegionKind kind) {
  for (uint32_t r = 0; r < plan.num_regions; ++r) {
    if (plan.regions[r].kind == kind) return plan.regions[r];
  }
  ADD_FAILURE() << "no region of kind " << kind;
  return plan.regions[0];
}

TEST(CApi, StatusStringsAreStableAndNeverNull) {
  EXPECT_STREQ(epc_status_string(EPC_OK), "success");
  EXPECT_STREQ(epc_status_string(EPC_ERR_TIMEOUT), "timeout: a peer did not arrive");
  // 0..12 are defined in 2.0 (EPC_ERR_CAPACITY and EPC_ERR_INVALID_USAGE are new).
  EXPECT_EQ(EPC_ERR_CAPACITY, 11);
  EXPECT_EQ(EPC_ERR_INVALID_USAGE, 12);
  std::vector<std::string> seen;
  for (EpcStatus s = EPC_OK; s <= EPC_ERR_INVALID_USAGE; ++s) {
    ASSERT_NE(epc_status_string(s), nullptr);
    const std::string text = epc_status_string(s);
    EXPECT_NE(text, "unknown status") << s;
    for (const std::string& other : seen) EXPECT_NE(text, other) << s << ": two codes, one name";
    seen.push_back(text);
  }
  EXPECT_STREQ(epc_status_string(EPC_ERR_INVALID_USAGE + 1), "unknown status");
  EXPECT_STREQ(epc_status_string(-1), "unknown status");
  EXPECT_STREQ(epc_status_string(12345), "unknown status");
}

TEST(CApi, VersionMatchesHeader) {
  EXPECT_EQ(EPC_ABI_MAJOR, 2);
  uint32_t major = 0, minor = 0, patch = 0;
  ASSERT_EQ(epc_get_version(&major, &minor, &patch), EPC_OK);
  EXPECT_EQ(major, static_cast<uint32_t>(EPC_ABI_MAJOR));
  EXPECT_EQ(minor, static_cast<uint32_t>(EPC_ABI_MINOR));
  EXPECT_EQ(patch, static_cast<uint32_t>(EPC_ABI_PATCH));
  EXPECT_EQ(epc_get_version(nullptr, nullptr, nullptr), EPC_OK);
}

TEST(CApi, LastErrorIsSetOnFailureAndClearedOnSuccess) {
  EXPECT_EQ(epc_plan_query(nullptr, 4, 4, 1, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error(), "");
  EXPECT_EQ(epc_get_version(nullptr, nullptr, nullptr), EPC_OK);
  EXPECT_EQ(last_error(), "");
}

TEST(CApi, LastErrorTruncatesIntoSmallBuffers) {
  EpcGroupConfig c = valid_config();
  c.hidden = 0;
  EpcPlan plan = poisoned_plan();
  ASSERT_EQ(epc_plan_query(&c, 4, 4, 1, &plan), EPC_ERR_INVALID_ARGUMENT);
  std::string full = last_error();
  ASSERT_GT(full.size(), 8u);
  char small[6];
  size_t length = 0;
  ASSERT_EQ(epc_last_error(small, sizeof small, &length), EPC_OK);
  EXPECT_EQ(length, full.size());
  EXPECT_EQ(std::string(small), full.substr(0, 5));
  EXPECT_EQ(epc_last_error(nullptr, 3, nullptr), EPC_ERR_INVALID_ARGUMENT);
}

// ---- Initializers --------------------------------------------------------------------

template <typename T>
void expect_initialized(const T& value, const char* name) {
  std::vector<unsigned char> expected(sizeof(T), 0);
  const uint32_t header[2] = {static_cast<uint32_t>(sizeof(T)), EPC_ABI_VERSION};
  std::memcpy(expected.data(), header, sizeof header);
  EXPECT_EQ(std::memcmp(&value, expected.data(), sizeof(T)), 0) << name;
}

TEST(CApi, InitializersSetTheHeaderAndZeroTheRest) {
  expect_initialized<EpcGroupConfig>(EPC_GROUP_CONFIG_INIT, "EPC_GROUP_CONFIG_INIT");
  expect_initialized<EpcPlan>(EPC_PLAN_INIT, "EPC_PLAN_INIT");
  expect_initialized<EpcGroupInfo>(EPC_GROUP_INFO_INIT, "EPC_GROUP_INFO_INIT");
  expect_initialized<EpcHandleConfig>(EPC_HANDLE_CONFIG_INIT, "EPC_HANDLE_CONFIG_INIT");
  expect_initialized<EpcRouting>(EPC_ROUTING_INIT, "EPC_ROUTING_INIT");
  expect_initialized<EpcHandleInfo>(EPC_HANDLE_INFO_INIT, "EPC_HANDLE_INFO_INIT");
  expect_initialized<EpcDispatchArgs>(EPC_DISPATCH_ARGS_INIT, "EPC_DISPATCH_ARGS_INIT");
  expect_initialized<EpcCombineArgs>(EPC_COMBINE_ARGS_INIT, "EPC_COMBINE_ARGS_INIT");
  expect_initialized<EpcApi>(EPC_API_INIT, "EPC_API_INIT");
}

// ---- Plan query ----------------------------------------------------------------------

TEST(CApi, PlanQueryDescribesTheWindow) {
  EpcGroupConfig c = valid_config();
  EpcPlan plan = poisoned_plan();
  ASSERT_EQ(epc_plan_query(&c, 4, 4, 1, &plan), EPC_OK) << last_error();
  EXPECT_EQ(plan.struct_size, sizeof plan);
  EXPECT_EQ(plan.mode, static_cast<EpcMode>(EPC_MODE_LOW_LATENCY));
  EXPECT_EQ(plan.num_slots, 2u);
  ASSERT_GE(plan.num_regions, 1u);
  ASSERT_LE(plan.num_regions, static_cast<uint32_t>(EPC_PLAN_MAX_REGIONS));
  EXPECT_STREQ(plan.regions[0].name, "control");
  EXPECT_EQ(plan.regions[0].slot, EPC_SLOT_NONE);
  EXPECT_STREQ(plan.regions[1].name, "dispatch_recv[0]");
  EXPECT_EQ(plan.regions[1].slot, 0u);
  const EpcPlanRegion& last = plan.regions[plan.num_regions - 1];
  EXPECT_GE(plan.symmetric_bytes, last.offset + last.size);
  EXPECT_GT(plan.handle_bytes, 0u);
  EXPECT_EQ(plan.reserved0, 0u);
  // Unused entries are zeroed, not left as garbage.
  for (uint32_t r = plan.num_regions; r < EPC_PLAN_MAX_REGIONS; ++r) EXPECT_EQ(plan.regions[r].size, 0u) << r;
}

TEST(CApi, PlanReportsTheGroupDefaults) {
  // max_token_bytes 0 -> 2 * H; recv_capacity 0 -> R * T; max_pending_steps 0 -> 2 (since
  // 2.1; the two-slot window 2.0 had).
  EpcPlan ll = plan_of(valid_config());
  EXPECT_EQ(ll.max_token_bytes, 2 * kHidden);
  EXPECT_EQ(ll.recv_capacity, kRanks * kLlTokens);
  EXPECT_EQ(ll.max_pending_steps, 2u);
  EXPECT_EQ(ll.num_slots, 2u);
  EpcPlan ht = plan_of(valid_config(EPC_MODE_HIGH_THROUGHPUT));
  EXPECT_EQ(ht.mode, static_cast<EpcMode>(EPC_MODE_HIGH_THROUGHPUT));
  EXPECT_EQ(ht.max_token_bytes, 2 * kHidden);
  EXPECT_EQ(ht.recv_capacity, kRanks * kHtTokens);
  EXPECT_EQ(ht.max_pending_steps, 2u);
  // mode 0 is LL.
  EpcGroupConfig zero_mode = valid_config();
  zero_mode.mode = 0;
  EXPECT_EQ(plan_of(zero_mode).mode, static_cast<EpcMode>(EPC_MODE_LOW_LATENCY));
}

struct Rejection {
  const char* what;
  EpcStatus status;
  std::vector<const char*> message_parts;
};

// The call fails with the status, its message names every part, and the plan is untouched.
void expect_plan_rejected(const EpcGroupConfig& c, int nranks, const Rejection& expected) {
  EpcPlan plan = poisoned_plan();
  const EpcPlan before = plan;
  EXPECT_EQ(epc_plan_query(&c, nranks, nranks, 1, &plan), expected.status) << expected.what;
  const std::string message = last_error();
  for (const char* part : expected.message_parts) {
    EXPECT_TRUE(mentions(message, part)) << expected.what << ": \"" << message << "\" does not name " << part;
  }
  EXPECT_EQ(std::memcmp(&plan, &before, sizeof plan), 0) << expected.what << ": output written";
}

TEST(CApi, PlanQueryRejectsBadConfigs) {
  EpcGroupConfig c = valid_config();
  c.hidden = 0;
  expect_plan_rejected(c, 4, {"zero hidden", EPC_ERR_INVALID_ARGUMENT, {"hidden"}});
  c = valid_config();
  expect_plan_rejected(c, 3, {"experts % ranks", EPC_ERR_INVALID_ARGUMENT, {"divisible"}});
  c = valid_config();
  c.struct_size = 3;
  expect_plan_rejected(c, 4, {"struct_size", EPC_ERR_ABI_MISMATCH, {"EpcGroupConfig", "struct_size"}});
  c = valid_config();
  c.abi_version = 90000;
  expect_plan_rejected(c, 4, {"abi_version", EPC_ERR_ABI_MISMATCH, {"EpcGroupConfig", "abi_version"}});
  c = valid_config();
  c.abi_version = 10300;  // a 1.3 caller: another major
  expect_plan_rejected(c, 4, {"abi_version 1.3", EPC_ERR_ABI_MISMATCH, {"EpcGroupConfig", "abi_version"}});
  c = valid_config();
  expect_plan_rejected(c, 0, {"no ranks", EPC_ERR_INVALID_ARGUMENT, {"nranks"}});
  c = valid_config();
  c.mode = 3;
  expect_plan_rejected(c, 4, {"mode 3", EPC_ERR_INVALID_ARGUMENT, {"mode"}});
}

// max_token_bytes: 0 -> 2H; >= 2H: the 16-bit window, reported as 2H; in [H + H/32, 2H)
// with H % 128 == 0: the fp8-only window, reported as H + H/32; below: INVALID_ARGUMENT.
TEST(CApi, MaxTokenBytesIsRoundedDownToAWindow) {
  const uint32_t fp8_bytes = kHidden + kHidden / 32;
  struct Case {
    uint32_t requested, reported;
  };
  const Case cases[] = {
      {2 * kHidden, 2 * kHidden},   {2 * kHidden + 1, 2 * kHidden}, {1u << 30, 2 * kHidden},
      {2 * kHidden - 1, fp8_bytes}, {fp8_bytes + 1, fp8_bytes},     {fp8_bytes, fp8_bytes},
  };
  for (const Case& k : cases) {
    EpcGroupConfig c = valid_config();
    c.max_token_bytes = k.requested;
    EXPECT_EQ(plan_of(c).max_token_bytes, k.reported) << "requested " << k.requested;
    // HT slots hold max_token_bytes itself (2.1): reported as asked, 0 as 2H, up to 8 * H.
    c.mode = EPC_MODE_HIGH_THROUGHPUT;
    if (k.requested > 8 * kHidden) continue;
    EXPECT_EQ(plan_of(c).max_token_bytes, k.requested == 0 ? 2 * kHidden : k.requested)
        << "HT, requested " << k.requested;
  }
  // The default and 2.0's fp8 window keep 2.0's HT slots; a larger max_token_bytes grows them.
  EpcGroupConfig ht = valid_config();
  ht.mode = EPC_MODE_HIGH_THROUGHPUT;
  const uint32_t default_message = plan_of(ht).message_bytes;
  ht.max_token_bytes = 2 * kHidden;
  EXPECT_EQ(plan_of(ht).message_bytes, default_message);
  ht.max_token_bytes = 2 * kHidden + 4096;
  EXPECT_EQ(plan_of(ht).message_bytes,
            default_message - (2 * kHidden + 16 * ((kHidden / 128 * 4 + 15) / 16)) + 2 * kHidden + 4096);
  // The fp8-only window is smaller: fewer bytes per message.
  EpcGroupConfig fp8 = valid_config();
  fp8.max_token_bytes = fp8_bytes;
  EXPECT_LT(plan_of(fp8).message_bytes, plan_of(valid_config()).message_bytes);
  EXPECT_LT(plan_of(fp8).symmetric_bytes, plan_of(valid_config()).symmetric_bytes);

  EpcGroupConfig c = valid_config();
  c.max_token_bytes = fp8_bytes - 1;
  expect_plan_rejected(c, kRanks, {"below H + H/32", EPC_ERR_INVALID_ARGUMENT, {"EpcGroupConfig", "max_token_bytes"}});
  c.max_token_bytes = 1;
  expect_plan_rejected(c, kRanks, {"1 byte", EPC_ERR_INVALID_ARGUMENT, {"EpcGroupConfig", "max_token_bytes"}});
  // H = 2880 is not a multiple of 128: no fp8-only window, only 2H and more.
  c = valid_config();
  c.hidden = 2880;
  c.max_token_bytes = 2 * 2880;
  EXPECT_EQ(plan_of(c).max_token_bytes, 2u * 2880);
  c.max_token_bytes = 2 * 2880 - 1;
  expect_plan_rejected(
      c, kRanks, {"fp8 window with H % 128 != 0", EPC_ERR_INVALID_ARGUMENT, {"EpcGroupConfig", "max_token_bytes"}});
  c.max_token_bytes = 2880 + 2880 / 32;
  expect_plan_rejected(c, kRanks,
                       {"H + H/32 with H % 128 != 0", EPC_ERR_INVALID_ARGUMENT, {"EpcGroupConfig", "max_token_bytes"}});
}

// recv_capacity: 0 -> R * T; R * T accepted; fewer UNSUPPORTED (2.0); more INVALID_ARGUMENT.
TEST(CApi, RecvCapacityIsCheckedAgainstTheRankCount) {
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    const uint64_t full = kRanks * (mode == EPC_MODE_LOW_LATENCY ? kLlTokens : kHtTokens);
    EpcGroupConfig c = valid_config(mode);
    c.recv_capacity = full;
    EXPECT_EQ(plan_of(c).recv_capacity, full) << mode;
    if (mode == EPC_MODE_LOW_LATENCY) {  // LL windows hold R * T by construction
      c.recv_capacity = full - 1;
      expect_plan_rejected(c, kRanks,
                           {"recv_capacity < R*T", EPC_ERR_UNSUPPORTED, {"EpcGroupConfig", "recv_capacity"}});
      c.recv_capacity = 1;
      expect_plan_rejected(c, kRanks, {"recv_capacity 1", EPC_ERR_UNSUPPORTED, {"EpcGroupConfig", "recv_capacity"}});
    } else {  // HT serves any capacity up to R * T on one node
      c.recv_capacity = full - 1;
      EXPECT_EQ(plan_of(c).recv_capacity, full - 1);
      c.recv_capacity = 1;
      EXPECT_EQ(plan_of(c).recv_capacity, 1u);
    }
    c.recv_capacity = full + 1;
    expect_plan_rejected(c, kRanks,
                         {"recv_capacity > R*T", EPC_ERR_INVALID_ARGUMENT, {"EpcGroupConfig", "recv_capacity"}});
    c.recv_capacity = UINT64_MAX;
    expect_plan_rejected(c, kRanks,
                         {"recv_capacity 2^64-1", EPC_ERR_INVALID_ARGUMENT, {"EpcGroupConfig", "recv_capacity"}});
    // The same value is R * T for twice the ranks: the check needs R.
    c.recv_capacity = 2 * full;
    EXPECT_EQ(plan_of(c, 2 * kRanks).recv_capacity, 2 * full) << mode;
  }
}

// Across nodes with whole steps (EPCOMM_HT_PART_TOKENS=0): by default a window of the whole
// step's capacity holds a part of a step (PlanQueryReportsStepsInParts).
TEST(CApi, HighThroughputCapacityShrinksTheDispatchWindowOnAndAcrossNodes) {
  const epc::test::ScopedEnv whole_steps("EPCOMM_HT_PART_TOKENS", "0");
  const uint64_t full = kRanks * kHtTokens;
  EpcGroupConfig c = valid_config(EPC_MODE_HIGH_THROUGHPUT);
  // One node, then across nodes (here virtual ones, since 2.1): the same shrinking.
  for (uint32_t node_size : {0u, static_cast<uint32_t>(kRanks / 2)}) {
    c.virtual_node_size = node_size;
    c.recv_capacity = 0;
    const EpcPlan worst = plan_of(c);
    c.recv_capacity = full / 4;
    const EpcPlan quarter = plan_of(c);
    // The dispatch window holds recv_capacity slots of message_bytes; nothing else changes.
    const EpcPlanRegion& all = find_region(worst, EPC_REGION_DISPATCH_RECV);
    const EpcPlanRegion& some = find_region(quarter, EPC_REGION_DISPATCH_RECV);
    EXPECT_EQ(all.size, full * worst.message_bytes) << node_size;
    EXPECT_EQ(some.size, full / 4 * quarter.message_bytes) << node_size;
    EXPECT_EQ(worst.symmetric_bytes - quarter.symmetric_bytes, all.size - some.size) << node_size;
    EXPECT_EQ(find_region(quarter, EPC_REGION_COMBINE_RECV).size, find_region(worst, EPC_REGION_COMBINE_RECV).size);
    EXPECT_EQ(quarter.handle_bytes, worst.handle_bytes) << node_size;
    EXPECT_EQ(quarter.recv_capacity, full / 4) << node_size;
  }
}

TEST(CApi, OverflowPendingStepsAndFlags) {
  EpcGroupConfig c = valid_config();
  c.overflow = EPC_OVERFLOW_DROP;
  plan_of(c);
  c.overflow = EPC_OVERFLOW_FAIL;
  plan_of(c);
  c.overflow = 2;
  expect_plan_rejected(c, kRanks, {"overflow 2", EPC_ERR_INVALID_ARGUMENT, {"EpcGroupConfig", "overflow"}});

  c = valid_config();
  c.max_pending_steps = 1;
  EXPECT_EQ(plan_of(c).max_pending_steps, 1u);
  const uint64_t two_slots = plan_of(c).symmetric_bytes;
  c.max_pending_steps = 2;
  EXPECT_EQ(plan_of(c).symmetric_bytes, two_slots);
  c.max_pending_steps = 3;
  EXPECT_EQ(plan_of(c).max_pending_steps, 3u);
  EXPECT_EQ(plan_of(c).num_slots, 3u);
  EXPECT_GT(plan_of(c).symmetric_bytes, two_slots);
  c.max_pending_steps = 4;
  expect_plan_rejected(c, kRanks,
                       {"max_pending_steps 4", EPC_ERR_UNSUPPORTED, {"EpcGroupConfig", "max_pending_steps"}});

  // Across nodes (virtual ones included) both modes serve the flag:
  // PlanQueryReportsThePerEntryCombineWindow (HT) and
  // PlanQueryReportsTheLowLatencyPerEntryCombineSlots (LL).
  c = valid_config(EPC_MODE_HIGH_THROUGHPUT);
  c.flags = 0x2;
  expect_plan_rejected(c, kRanks, {"unknown flag 0x2", EPC_ERR_INVALID_ARGUMENT, {"EpcGroupConfig", "flags"}});
  c.flags = 0x80000000u;
  expect_plan_rejected(c, kRanks, {"unknown flag 0x80000000", EPC_ERR_INVALID_ARGUMENT, {"EpcGroupConfig", "flags"}});
}

// Across nodes (virtual ones here) in parts of 512 tokens per rank (EPCOMM_HT_PART_TOKENS,
// core/ht/ht_parts.hpp), the window holds a part of a step: its slots and staging are those of
// 512 tokens, whatever max_tokens_per_rank; a recv_capacity below the worst case keeps whole
// steps.
TEST(CApi, PlanQueryReportsStepsInParts) {
  const epc::test::ScopedEnv part_tokens("EPCOMM_HT_PART_TOKENS", "512");
  constexpr uint64_t kPart = 512;
  EpcGroupConfig c = valid_config(EPC_MODE_HIGH_THROUGHPUT);
  c.virtual_node_size = kRanks / 2;
  const EpcPlan parts = plan_of(c);
  EXPECT_EQ(find_region(parts, EPC_REGION_DISPATCH_RECV).size, kRanks * kPart * parts.message_bytes);
  EXPECT_EQ(parts.recv_capacity, kRanks * kHtTokens);  // the handles' rows: whole steps'
  c.max_tokens_per_rank = 4 * kHtTokens;
  EXPECT_EQ(plan_of(c).symmetric_bytes, parts.symmetric_bytes);
  c.max_tokens_per_rank = kHtTokens;
  c.recv_capacity = kRanks * kHtTokens - 1;
  const uint64_t compact = (kRanks * kHtTokens - 1) * parts.message_bytes;
  EXPECT_EQ(find_region(plan_of(c), EPC_REGION_DISPATCH_RECV).size, (compact + 255) / 256 * 256);
}

// HT groups with EPC_GROUP_COMBINE_PER_ENTRY: the plan reports the per-entry combine window,
// [R][T * max_topk] slots of a bf16 row and max_topk fp32 weights (default max_topk 8), on one
// node and across virtual nodes, where each rank also stages the entry rows it forwards to
// its rail peer in every other node (T * max_topk slots per other node, beside T partials);
// across nodes T is a part's tokens, 512 here (PlanQueryReportsStepsInParts).
TEST(CApi, PlanQueryReportsThePerEntryCombineWindow) {
  const epc::test::ScopedEnv parts("EPCOMM_HT_PART_TOKENS", "512");
  constexpr uint64_t kPart = 512;
  EpcGroupConfig c = valid_config(EPC_MODE_HIGH_THROUGHPUT);
  const EpcPlan per_rank = plan_of(c);
  c.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  const EpcPlan per_entry = plan_of(c);
  auto combine_recv = [](const EpcPlan& p) { return find_region(p, EPC_REGION_COMBINE_RECV).size; };
  const uint64_t slot = kHidden * 2 + 8 * 4;
  EXPECT_EQ(combine_recv(per_rank), kRanks * kHtTokens * slot);
  EXPECT_EQ(combine_recv(per_entry), kRanks * kHtTokens * 8 * slot);
  EXPECT_EQ(per_entry.symmetric_bytes - per_rank.symmetric_bytes, 7 * kRanks * kHtTokens * slot);
  for (uint32_t node_size : {1u, 2u}) {
    c.virtual_node_size = node_size;
    const uint64_t other_nodes = kRanks / node_size - 1;
    const EpcPlan split = plan_of(c);
    c.flags = 0;
    const EpcPlan split_per_rank = plan_of(c);
    c.flags = EPC_GROUP_COMBINE_PER_ENTRY;
    EXPECT_EQ(combine_recv(split), kRanks * kPart * 8 * slot) << node_size;
    auto staging = [](const EpcPlan& p) { return find_region(p, EPC_REGION_NET_STAGING).size; };
    const uint64_t grown = staging(split) - staging(split_per_rank);
    // max_topk more slots per token for each other node, up to the region's rounding.
    EXPECT_LE(grown, other_nodes * 8 * kPart * slot + 256) << node_size;
    EXPECT_GE(grown + 256, other_nodes * 8 * kPart * slot) << node_size;
  }
}

// LL groups with EPC_GROUP_COMBINE_PER_ENTRY: each combine slot holds [R][T][max_topk] bf16
// rows instead of [R][T] partials (the default max_topk 8) and no line records, in one node
// and across virtual nodes of 2 and 1, where the staging region grows too (each rank stages
// its entry rows for every rank of another node: tests/unit/test_planner.cpp pins the bytes).
TEST(CApi, PlanQueryReportsTheLowLatencyPerEntryCombineSlots) {
  for (uint32_t node_size : {0u, 2u, 1u}) {
    SCOPED_TRACE(testing::Message() << "virtual_node_size " << node_size);
    EpcGroupConfig c = valid_config();
    c.virtual_node_size = node_size;
    // The partials alone, without the line records a one-node group has beside them.
    const EpcPlan partials = [&] {
      const epc::test::ScopedEnv off("EPCOMM_LL_LINE_TOKENS", "0");
      return plan_of(c);
    }();
    c.flags = EPC_GROUP_COMBINE_PER_ENTRY;
    const EpcPlan per_entry = plan_of(c);
    EXPECT_EQ(per_entry.num_regions, partials.num_regions);
    for (uint32_t i = 0; i < per_entry.num_regions; ++i) {
      const EpcPlanRegion& r = per_entry.regions[i];
      if (r.kind != EPC_REGION_COMBINE_RECV) continue;
      EXPECT_EQ(r.size, 8 * find_region(partials, EPC_REGION_COMBINE_RECV).size) << r.slot;
    }
    const EpcPlanRegion& last = per_entry.regions[per_entry.num_regions - 1];
    EXPECT_EQ(last.kind, node_size == 0 ? EPC_REGION_COMBINE_SIGNAL : EPC_REGION_NET_STAGING);
    if (node_size != 0) {
      EXPECT_GT(last.size, find_region(partials, EPC_REGION_NET_STAGING).size);
    }
  }
}

TEST(CApi, PlanQueryRejectsNullAndBadOutput) {
  EpcGroupConfig c = valid_config();
  EXPECT_EQ(epc_plan_query(&c, 4, 4, 1, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "EpcPlan")) << last_error();
  EpcPlan plan = poisoned_plan();
  EXPECT_EQ(epc_plan_query(nullptr, 4, 4, 1, &plan), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "EpcGroupConfig")) << last_error();
  plan.struct_size = 0;
  EXPECT_EQ(epc_plan_query(&c, 4, 4, 1, &plan), EPC_ERR_ABI_MISMATCH);
  EXPECT_TRUE(mentions(last_error(), "EpcPlan")) << last_error();
  plan = poisoned_plan();
  plan.abi_version = 10300;
  EXPECT_EQ(epc_plan_query(&c, 4, 4, 1, &plan), EPC_ERR_ABI_MISMATCH);
  EXPECT_TRUE(mentions(last_error(), "EpcPlan")) << last_error();
}

// A caller's EpcGroupConfig of `size` bytes: the first min(size, sizeof) from `c`, then
// `tail_byte` at every byte past this header's struct.
std::vector<unsigned char> config_bytes(const EpcGroupConfig& c, size_t size, unsigned char tail_byte = 0) {
  std::vector<unsigned char> bytes(size, tail_byte);
  std::memcpy(bytes.data(), &c, size < sizeof c ? size : sizeof c);
  const uint32_t s = static_cast<uint32_t>(size);
  std::memcpy(bytes.data(), &s, sizeof s);
  return bytes;
}

TEST(CApi, ShorterGroupConfigGetsDefaultsForItsTail) {
  // An older caller whose struct ends before max_topk (an 8-byte boundary, as every layout's
  // size is): what lies past its end in memory is not read, and every later field defaults.
  EpcGroupConfig c = valid_config();
  c.max_topk = 99;        // invalid, but past the short struct's end
  c.max_token_bytes = 1;  // the same
  c.recv_capacity = 1;
  c.max_pending_steps = 7;
  c.flags = 0xFFFF;
  const size_t short_size = offsetof(EpcGroupConfig, max_topk);
  static_assert(offsetof(EpcGroupConfig, max_topk) % 8 == 0, "the short struct ends on an 8-byte boundary");
  std::vector<unsigned char> bytes(sizeof c);
  std::memcpy(bytes.data(), &c, sizeof c);
  const uint32_t s = static_cast<uint32_t>(short_size);
  std::memcpy(bytes.data(), &s, sizeof s);
  EpcPlan plan = EPC_PLAN_INIT;
  ASSERT_EQ(epc_plan_query(reinterpret_cast<const EpcGroupConfig*>(bytes.data()), kRanks, kRanks, 1, &plan), EPC_OK)
      << last_error();
  EXPECT_EQ(plan.max_token_bytes, 2 * kHidden);
  EXPECT_EQ(plan.recv_capacity, kRanks * kLlTokens);
  EXPECT_EQ(plan.max_pending_steps, 2u);
  // Four bytes more (28) is no layout's size, although it ends between two fields: refused,
  // as every size that is not a multiple of 8 is.
  const uint32_t inside = s + 4;
  std::memcpy(bytes.data(), &inside, sizeof inside);
  EXPECT_EQ(epc_plan_query(reinterpret_cast<const EpcGroupConfig*>(bytes.data()), kRanks, kRanks, 1, &plan),
            EPC_ERR_ABI_MISMATCH);
}

TEST(CApi, LongerGroupConfigNeedsAZeroTail) {
  EpcGroupConfig c = valid_config();
  auto zero_tail = config_bytes(c, sizeof c + 16);
  EpcPlan plan = EPC_PLAN_INIT;
  EXPECT_EQ(epc_plan_query(reinterpret_cast<const EpcGroupConfig*>(zero_tail.data()), kRanks, kRanks, 1, &plan), EPC_OK)
      << last_error();
  for (size_t at : {sizeof c, sizeof c + 15}) {
    auto bytes = config_bytes(c, sizeof c + 16);
    bytes[at] = 1;
    EpcPlan out = poisoned_plan();
    const EpcPlan before = out;
    EXPECT_EQ(epc_plan_query(reinterpret_cast<const EpcGroupConfig*>(bytes.data()), kRanks, kRanks, 1, &out),
              EPC_ERR_ABI_MISMATCH);
    const std::string message = last_error();
    EXPECT_TRUE(mentions(message, "EpcGroupConfig")) << message;
    EXPECT_TRUE(mentions(message, std::to_string(at).c_str())) << message << ": does not name byte " << at;
    EXPECT_EQ(std::memcmp(&out, &before, sizeof out), 0);
  }
}

TEST(CApi, PlanQueryWritesOnlyTheCallersPrefix) {
  EpcGroupConfig c = valid_config();
  EpcPlan full = plan_of(c, 2);
  const uint32_t old_size = static_cast<uint32_t>(offsetof(EpcPlan, recv_capacity));
  unsigned char buffer[sizeof(EpcPlan) + 16];
  std::memset(buffer, 0xCD, sizeof buffer);
  EpcPlan* plan = reinterpret_cast<EpcPlan*>(buffer);
  plan->struct_size = old_size;  // a caller that knows only up to handle_bytes
  plan->abi_version = EPC_ABI_VERSION;
  ASSERT_EQ(epc_plan_query(&c, 2, 2, 1, plan), EPC_OK) << last_error();
  EXPECT_EQ(std::memcmp(buffer + 8, reinterpret_cast<const unsigned char*>(&full) + 8, old_size - 8), 0);
  for (size_t i = old_size; i < sizeof buffer; ++i) ASSERT_EQ(buffer[i], 0xCD) << i;
  EXPECT_EQ(plan->struct_size, old_size);
  // A newer caller's longer EpcPlan: the unknown tail is zeroed.
  std::memset(buffer, 0xCD, sizeof buffer);
  plan->struct_size = sizeof buffer;
  plan->abi_version = EPC_ABI_VERSION;
  ASSERT_EQ(epc_plan_query(&c, 2, 2, 1, plan), EPC_OK) << last_error();
  for (size_t i = sizeof(EpcPlan); i < sizeof buffer; ++i) ASSERT_EQ(buffer[i], 0) << i;
  EXPECT_EQ(plan->struct_size, sizeof buffer);
}

// ---- Group, handle and step calls without a GPU ----------------------------------------

TEST(CApi, GroupCallsRejectNullAndBadConfigBeforeTouchingAGpu) {
  EpcGroupConfig c = valid_config();
  EpcGroup* group = reinterpret_cast<EpcGroup*>(0x1);
  EXPECT_EQ(epc_group_create(nullptr, &c, &group), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "comm is NULL")) << last_error();
  EXPECT_EQ(group, reinterpret_cast<EpcGroup*>(0x1));  // untouched on failure
  EXPECT_EQ(epc_group_create(nullptr, &c, nullptr), EPC_ERR_INVALID_ARGUMENT);
  c.hidden = 12;  // 24-byte rows
  EXPECT_EQ(epc_group_create(nullptr, &c, &group), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "hidden")) << last_error();
  EXPECT_EQ(epc_group_create(nullptr, nullptr, &group), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(group, reinterpret_cast<EpcGroup*>(0x1));

  EXPECT_EQ(epc_group_destroy(nullptr), EPC_OK);
  EpcGroupInfo info = EPC_GROUP_INFO_INIT;
  EXPECT_EQ(epc_group_query(nullptr, &info), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "group is NULL")) << last_error();
  EXPECT_EQ(epc_group_barrier(nullptr, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "group is NULL")) << last_error();
}

TEST(CApi, AsyncErrorRejectsNullAndObjectsThatAreNotLiveGroups) {
  EXPECT_EQ(epc_group_async_error(nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "group is NULL")) << last_error();
  // Zeroed memory (what a destroyed group's magic word becomes) and another object's bytes
  // are refused by the magic word, never read as a group's error record.
  uint64_t zeroed[8] = {};
  EXPECT_EQ(epc_group_async_error(reinterpret_cast<const EpcGroup*>(zeroed)), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "not a live EpcGroup")) << last_error();
  uint64_t not_a_group[8] = {0x6c646e6148435045ull, 2, 3, 4, 5, 6, 7, 8};  // a handle's magic
  EXPECT_EQ(epc_group_async_error(reinterpret_cast<const EpcGroup*>(not_a_group)), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "not a live EpcGroup")) << last_error();
  // Like every call, it clears the thread's message on entry.
  EXPECT_EQ(epc_get_version(nullptr, nullptr, nullptr), EPC_OK);
  EXPECT_EQ(last_error(), "");
}

TEST(CApi, HandleCallsRejectNullAndDeadObjects) {
  EpcTensor idx;
  std::memset(&idx, 0, sizeof idx);
  EpcRouting routing = EPC_ROUTING_INIT;
  routing.topk_idx = &idx;
  EpcHandleConfig config = EPC_HANDLE_CONFIG_INIT;
  EpcHandle* handle = reinterpret_cast<EpcHandle*>(0x1);
  EXPECT_EQ(epc_handle_create(nullptr, &config, &routing, nullptr, &handle), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "group is NULL")) << last_error();
  EXPECT_EQ(epc_handle_create(nullptr, nullptr, nullptr, nullptr, &handle), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "group is NULL")) << last_error();
  EXPECT_EQ(handle, reinterpret_cast<EpcHandle*>(0x1));
  uint64_t zeroed[8] = {};
  EXPECT_EQ(epc_handle_create(reinterpret_cast<EpcGroup*>(zeroed), nullptr, nullptr, nullptr, &handle),
            EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "not a live EpcGroup")) << last_error();
  EXPECT_EQ(handle, reinterpret_cast<EpcHandle*>(0x1));

  EXPECT_EQ(epc_handle_update(nullptr, &routing, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "handle is NULL")) << last_error();
  EXPECT_EQ(epc_handle_destroy(nullptr), EPC_OK);
  EXPECT_EQ(last_error(), "");

  EpcHandleInfo info;
  std::memset(&info, 0x5A, sizeof info);
  info.struct_size = sizeof info;
  info.abi_version = EPC_ABI_VERSION;
  const EpcHandleInfo before = info;
  EXPECT_EQ(epc_handle_query(nullptr, &info), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "handle is NULL")) << last_error();
  EXPECT_EQ(std::memcmp(&info, &before, sizeof info), 0);
}

TEST(CApi, StepCallsRejectNullAndDeadHandles) {
  EpcDispatchArgs dispatch = EPC_DISPATCH_ARGS_INIT;
  EpcCombineArgs combine = EPC_COMBINE_ARGS_INIT;
  EXPECT_EQ(epc_dispatch(nullptr, &dispatch, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "handle is NULL")) << last_error();
  EXPECT_EQ(epc_combine(nullptr, &combine, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "handle is NULL")) << last_error();
  EXPECT_EQ(epc_complete(nullptr, 0, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "handle is NULL")) << last_error();
  // A pointer that is not a live handle is refused by its magic word, not dereferenced
  // blindly: a destroyed one (zeroed), a group's bytes, garbage.
  uint64_t zeroed[8] = {};
  uint64_t a_group[8] = {0x70757247435045ull, 0, 0, 0, 0, 0, 0, 0};
  uint64_t garbage[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  for (uint64_t* bytes : {zeroed, a_group, garbage}) {
    EpcHandle* h = reinterpret_cast<EpcHandle*>(bytes);
    EXPECT_EQ(epc_dispatch(h, &dispatch, nullptr), EPC_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(mentions(last_error(), "not a live EpcHandle")) << last_error();
    EXPECT_EQ(epc_combine(h, &combine, nullptr), EPC_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(mentions(last_error(), "not a live EpcHandle")) << last_error();
    EXPECT_EQ(epc_complete(h, 0, nullptr), EPC_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(mentions(last_error(), "not a live EpcHandle")) << last_error();
    EpcRouting routing = EPC_ROUTING_INIT;
    EXPECT_EQ(epc_handle_update(h, &routing, nullptr), EPC_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(mentions(last_error(), "not a live EpcHandle")) << last_error();
    EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
    EXPECT_EQ(epc_handle_query(h, &info), EPC_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(mentions(last_error(), "not a live EpcHandle")) << last_error();
    EXPECT_EQ(info.mode, 0u);  // untouched
  }
}

TEST(CApi, BootstrapRejectsBadArguments) {
  EXPECT_EQ(epc_unique_id_create(nullptr), EPC_ERR_INVALID_ARGUMENT);
  EpcUniqueId id;
  std::memset(&id, 0, sizeof id);
  void* comm = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(epc_comm_init(nullptr, 2, 0, 0, &comm), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(epc_comm_init(&id, 0, 0, 0, &comm), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "nranks")) << last_error();
  EXPECT_EQ(epc_comm_init(&id, 2, 2, 0, &comm), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "rank is 2")) << last_error();
  EXPECT_EQ(epc_comm_init(&id, 2, 0, 0, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(comm, reinterpret_cast<void*>(0x1));
  EXPECT_EQ(epc_comm_destroy(nullptr), EPC_OK);
}

// epc_comm_init_config checks its options and the arguments epc_comm_init checks before it
// looks for NCCL or a GPU, and writes nothing when it refuses.
TEST(CApi, BootstrapWithOptionsRejectsBadArguments) {
  EpcUniqueId id;
  std::memset(&id, 0, sizeof id);
  void* comm = reinterpret_cast<void*>(0x1);
  EpcCommConfig config = EPC_COMM_CONFIG_INIT;
  config.timeout_ms = 1000;
  EXPECT_EQ(epc_comm_init_config(&id, 2, 0, 0, nullptr, &comm), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "EpcCommConfig pointer is NULL")) << last_error();
  EXPECT_EQ(epc_comm_init_config(nullptr, 2, 0, 0, &config, &comm), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(epc_comm_init_config(&id, 2, 0, 0, &config, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(epc_comm_init_config(&id, 0, 0, 0, &config, &comm), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "nranks is 0")) << last_error();
  EXPECT_EQ(epc_comm_init_config(&id, 2, -1, 0, &config, &comm), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "rank is -1")) << last_error();
  config.flags = 4;
  EXPECT_EQ(epc_comm_init_config(&id, 2, 0, 0, &config, &comm), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(last_error(), "EpcCommConfig.flags is 0x4")) << last_error();
  config = EPC_COMM_CONFIG_INIT;
  config.struct_size = 4;
  EXPECT_EQ(epc_comm_init_config(&id, 2, 0, 0, &config, &comm), EPC_ERR_ABI_MISMATCH);
  // A newer caller's longer struct is read only when its unknown tail is zero.
  struct Longer {
    EpcCommConfig known;
    uint64_t later_field;
  } longer{};
  longer.known = EPC_COMM_CONFIG_INIT;
  longer.known.struct_size = sizeof longer;
  longer.later_field = 1;
  EXPECT_EQ(epc_comm_init_config(&id, 2, 0, 0, &longer.known, &comm), EPC_ERR_ABI_MISMATCH);
  EXPECT_EQ(comm, reinterpret_cast<void*>(0x1));
}

// ---- Function table ------------------------------------------------------------------

TEST(CApi, FunctionTable) {
  EpcApi api = EPC_API_INIT;
  EXPECT_EQ(epc_get_api(EPC_ABI_MAJOR + 1, &api), EPC_ERR_ABI_MISMATCH);
  EXPECT_EQ(epc_get_api(EPC_ABI_MAJOR - 1, &api), EPC_ERR_ABI_MISMATCH);  // a 1.x caller
  EXPECT_EQ(api.status_string, nullptr);                                  // refused: untouched
  EXPECT_EQ(epc_get_api(EPC_ABI_MAJOR, nullptr), EPC_ERR_INVALID_ARGUMENT);
  api.struct_size = 0;
  EXPECT_EQ(epc_get_api(EPC_ABI_MAJOR, &api), EPC_ERR_ABI_MISMATCH);
  // A size ending inside an entry (half a pointer) is refused, and nothing is written.
  for (uint32_t size : {12u, 20u, static_cast<uint32_t>(sizeof(EpcApi)) - 4u}) {
    api = EPC_API_INIT;
    api.struct_size = size;
    EXPECT_EQ(epc_get_api(EPC_ABI_MAJOR, &api), EPC_ERR_ABI_MISMATCH) << size;
    EXPECT_NE(last_error().find("ends inside a field"), std::string::npos) << last_error();
    EXPECT_EQ(api.status_string, nullptr) << size;
  }
  api = EPC_API_INIT;
  ASSERT_EQ(epc_get_api(EPC_ABI_MAJOR, &api), EPC_OK) << last_error();
  EXPECT_EQ(api.struct_size, sizeof api);
  EXPECT_EQ(api.abi_version, EPC_ABI_VERSION);
  // Every entry is the exported function of its name, in the header's order.
  EXPECT_EQ(api.status_string, &epc_status_string);
  EXPECT_EQ(api.last_error, &epc_last_error);
  EXPECT_EQ(api.get_version, &epc_get_version);
  EXPECT_EQ(api.unique_id_create, &epc_unique_id_create);
  EXPECT_EQ(api.comm_init, &epc_comm_init);
  EXPECT_EQ(api.comm_destroy, &epc_comm_destroy);
  EXPECT_EQ(api.plan_query, &epc_plan_query);
  EXPECT_EQ(api.group_create, &epc_group_create);
  EXPECT_EQ(api.group_destroy, &epc_group_destroy);
  EXPECT_EQ(api.group_query, &epc_group_query);
  EXPECT_EQ(api.group_barrier, &epc_group_barrier);
  EXPECT_EQ(api.group_async_error, &epc_group_async_error);
  EXPECT_EQ(api.handle_create, &epc_handle_create);
  EXPECT_EQ(api.handle_update, &epc_handle_update);
  EXPECT_EQ(api.handle_query, &epc_handle_query);
  EXPECT_EQ(api.handle_destroy, &epc_handle_destroy);
  EXPECT_EQ(api.dispatch, &epc_dispatch);
  EXPECT_EQ(api.combine, &epc_combine);
  EXPECT_EQ(api.complete, &epc_complete);
  EXPECT_EQ(api.comm_init_config, &epc_comm_init_config);
  EXPECT_EQ(offsetof(EpcApi, comm_init_config) + sizeof api.comm_init_config, sizeof(EpcApi));
  EXPECT_STREQ(api.status_string(EPC_ERR_NCCL), "NCCL error");

  // An older caller knowing only the first three entries gets exactly those, and learns
  // how long the library's table is.
  unsigned char buffer[sizeof(EpcApi)];
  std::memset(buffer, 0xEE, sizeof buffer);
  EpcApi* old = reinterpret_cast<EpcApi*>(buffer);
  const uint32_t old_size = static_cast<uint32_t>(offsetof(EpcApi, unique_id_create));
  old->struct_size = old_size;
  old->abi_version = EPC_ABI_VERSION;
  ASSERT_EQ(epc_get_api(EPC_ABI_MAJOR, old), EPC_OK);
  EXPECT_EQ(old->get_version, &epc_get_version);
  EXPECT_EQ(old->struct_size, sizeof(EpcApi));
  for (size_t i = old_size; i < sizeof buffer; ++i) ASSERT_EQ(buffer[i], 0xEE) << i;
}

}  // namespace
