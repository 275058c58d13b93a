// SPDX-License-Identifier: Apache-2.0
// Configuration defaults and validation (core/config.cpp).
#include <gtest/gtest.h>

#include "core/config.hpp"
#include "core/error.hpp"

namespace {

EpcGroupConfig minimal() {
  EpcGroupConfig c = EPC_GROUP_CONFIG_INIT;
  c.num_experts = 256;
  c.hidden = 7168;
  return c;
}

EpcStatus status_of(const EpcGroupConfig& c, std::string* message = nullptr) {
  try {
    epc::resolve_config(&c);
    return EPC_OK;
  } catch (const epc::Error& e) {
    if (message != nullptr) *message = e.what();
    return e.status();
  }
}

TEST(Config, DefaultsForLowLatency) {
  EpcGroupConfig raw = minimal();
  epc::GroupConfig c = epc::resolve_config(&raw);
  EXPECT_EQ(c.mode, static_cast<EpcMode>(EPC_MODE_LOW_LATENCY));
  EXPECT_EQ(c.max_tokens_per_rank, 128u);
  EXPECT_EQ(c.max_topk, 8u);
  EXPECT_EQ(c.num_sms, 132u);
  EXPECT_EQ(c.timeout_ms, 10000u);
  EXPECT_EQ(c.alloc_fn, nullptr);
}

TEST(Config, DefaultsForHighThroughput) {
  EpcGroupConfig raw = minimal();
  raw.mode = EPC_MODE_HIGH_THROUGHPUT;
  epc::GroupConfig c = epc::resolve_config(&raw);
  EXPECT_EQ(c.max_tokens_per_rank, 4096u);
  EXPECT_EQ(c.num_sms, 24u);
}

TEST(Config, ExplicitValuesAreKept) {
  EpcGroupConfig raw = minimal();
  raw.max_tokens_per_rank = 256;
  raw.max_topk = 16;
  raw.num_sms = 20;
  raw.timeout_ms = 500;
  epc::GroupConfig c = epc::resolve_config(&raw);
  EXPECT_EQ(c.max_tokens_per_rank, 256u);
  EXPECT_EQ(c.max_topk, 16u);
  EXPECT_EQ(c.num_sms, 20u);
  EXPECT_EQ(c.timeout_ms, 500u);
}

TEST(Config, ZeroHiddenIsRejectedByName) {
  EpcGroupConfig raw = minimal();
  raw.hidden = 0;
  std::string msg;
  EXPECT_EQ(status_of(raw, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("hidden"), std::string::npos) << msg;
}

TEST(Config, HiddenMustGiveSixteenByteRows) {
  EpcGroupConfig raw = minimal();
  raw.hidden = 2884;  // 5768 bytes: not a multiple of 16
  std::string msg;
  EXPECT_EQ(status_of(raw, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("multiple of 8"), std::string::npos) << msg;
  raw.hidden = 2880;
  EXPECT_EQ(status_of(raw), EPC_OK);
}

TEST(Config, ZeroExpertsIsRejected) {
  EpcGroupConfig raw = minimal();
  raw.num_experts = 0;
  std::string msg;
  EXPECT_EQ(status_of(raw, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("num_experts"), std::string::npos) << msg;
}

TEST(Config, BadModeIsRejected) {
  EpcGroupConfig raw = minimal();
  raw.mode = 3;
  EXPECT_EQ(status_of(raw), EPC_ERR_INVALID_ARGUMENT);
}

TEST(Config, TokenLimitsDependOnMode) {
  EpcGroupConfig raw = minimal();
  raw.max_tokens_per_rank = 1024;
  EXPECT_EQ(status_of(raw), EPC_OK);
  raw.max_tokens_per_rank = 1025;
  EXPECT_EQ(status_of(raw), EPC_ERR_INVALID_ARGUMENT);
  raw.mode = EPC_MODE_HIGH_THROUGHPUT;
  EXPECT_EQ(status_of(raw), EPC_OK);
  raw.max_tokens_per_rank = 65537;
  EXPECT_EQ(status_of(raw), EPC_ERR_INVALID_ARGUMENT);
}

TEST(Config, TopkRange) {
  EpcGroupConfig raw = minimal();
  raw.max_topk = 32;
  EXPECT_EQ(status_of(raw), EPC_OK);
  raw.max_topk = 33;
  EXPECT_EQ(status_of(raw), EPC_ERR_INVALID_ARGUMENT);
}

// flags: EPC_GROUP_COMBINE_PER_ENTRY is served in both modes (since 2.1; across nodes the
// planner refuses it on LL groups: tests/unit/test_c_api.cpp); unknown bits are invalid.
// Messages name the struct and the field.
TEST(Config, GroupFlags) {
  EpcGroupConfig raw = minimal();
  std::string msg;
  raw.flags = EPC_GROUP_COMBINE_PER_ENTRY;
  EXPECT_EQ(status_of(raw), EPC_OK);
  EXPECT_EQ(epc::resolve_config(&raw).flags, EPC_GROUP_COMBINE_PER_ENTRY);
  raw.mode = EPC_MODE_HIGH_THROUGHPUT;
  EXPECT_EQ(status_of(raw), EPC_OK);
  EXPECT_EQ(epc::resolve_config(&raw).flags, EPC_GROUP_COMBINE_PER_ENTRY);
  EXPECT_EQ(epc::resolve_config(&raw).combine_slots_per_token(), 8u);  // max_topk's default
  raw.mode = EPC_MODE_LOW_LATENCY;
  for (uint32_t unknown : {0x2u, 0x4u, 0x80000000u}) {
    raw.flags = unknown;
    EXPECT_EQ(status_of(raw, &msg), EPC_ERR_INVALID_ARGUMENT) << unknown;
    EXPECT_NE(msg.find("flags"), std::string::npos) << msg;
  }
}

int32_t dummy_alloc(void*, size_t, void**) { return 1; }

TEST(Config, AllocatorNeedsBothCallbacks) {
  EpcGroupConfig raw = minimal();
  raw.alloc_fn = &dummy_alloc;
  std::string msg;
  EXPECT_EQ(status_of(raw, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("free_fn"), std::string::npos) << msg;
}

TEST(Config, ExpertsMustDivideByRanks) {
  EpcGroupConfig raw = minimal();
  epc::GroupConfig c = epc::resolve_config(&raw);
  EXPECT_NO_THROW(epc::check_config_for_ranks(c, 4));
  try {
    epc::check_config_for_ranks(c, 3);
    FAIL() << "256 experts on 3 ranks must be rejected";
  } catch (const epc::Error& e) {
    EXPECT_EQ(e.status(), EPC_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("divisible"), std::string::npos);
  }
}

}  // namespace

namespace {

// max_token_bytes: 0 -> 2H; >= 2H the 16-bit window; [H + H/32, 2H) the fp8-only window
// when H is a multiple of 128; anything below, or between with other H: INVALID_ARGUMENT.
TEST(Config, MaxTokenBytesWindows) {
  EpcGroupConfig raw = minimal();  // H = 7168, a multiple of 128
  const uint32_t h = raw.hidden;
  for (uint32_t ok : {0u, 2 * h, 2 * h + 1, 0xFFFFFFFFu, 2 * h - 1, h + h / 32, h + h / 32 + 1}) {
    raw.max_token_bytes = ok;
    EXPECT_EQ(status_of(raw), EPC_OK) << ok;
  }
  std::string msg;
  for (uint32_t bad : {1u, h, h + h / 32 - 1}) {
    raw.max_token_bytes = bad;
    EXPECT_EQ(status_of(raw, &msg), EPC_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(msg.find("EpcGroupConfig"), std::string::npos) << msg;
    EXPECT_NE(msg.find("max_token_bytes"), std::string::npos) << msg;
  }
  // H = 2880 (22.5 blocks of 128): no fp8-only window.
  raw.hidden = 2880;
  raw.max_token_bytes = 2 * 2880;
  EXPECT_EQ(status_of(raw), EPC_OK);
  for (uint32_t bad : {2880u + 2880u / 32, 2u * 2880 - 1}) {
    raw.max_token_bytes = bad;
    EXPECT_EQ(status_of(raw, &msg), EPC_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(msg.find("max_token_bytes"), std::string::npos) << msg;
  }
}

// HT groups hold max_token_bytes as given, so it is bounded (8 bytes per channel): a slot's
// 32-bit offsets stay exact. LL groups round it down and accept any larger value.
TEST(Config, HighThroughputMaxTokenBytesIsBounded) {
  EpcGroupConfig raw = minimal();
  const uint32_t h = raw.hidden;
  raw.mode = EPC_MODE_HIGH_THROUGHPUT;
  raw.max_token_bytes = 8 * h;
  EXPECT_EQ(status_of(raw), EPC_OK);
  std::string msg;
  for (uint32_t bad : {8 * h + 1, 0xFFFFFFF5u, 0xFFFFFFFFu}) {
    raw.max_token_bytes = bad;
    EXPECT_EQ(status_of(raw, &msg), EPC_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(msg.find("max_token_bytes"), std::string::npos) << msg;
  }
  raw.mode = EPC_MODE_LOW_LATENCY;
  EXPECT_EQ(status_of(raw), EPC_OK);
}

TEST(Config, OverflowPolicy) {
  EpcGroupConfig raw = minimal();
  raw.overflow = EPC_OVERFLOW_FAIL;
  EXPECT_EQ(status_of(raw), EPC_OK);
  raw.overflow = EPC_OVERFLOW_DROP;
  EXPECT_EQ(status_of(raw), EPC_OK);
  std::string msg;
  for (uint32_t bad : {2u, 0xFFFFFFFFu}) {
    raw.overflow = bad;
    EXPECT_EQ(status_of(raw, &msg), EPC_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(msg.find("EpcGroupConfig"), std::string::npos) << msg;
    EXPECT_NE(msg.find("overflow"), std::string::npos) << msg;
  }
}

TEST(Config, MaxPendingSteps) {
  EpcGroupConfig raw = minimal();
  EXPECT_EQ(epc::resolve_config(&raw).max_pending_steps, epc::limits::kDefaultPendingSteps);
  EXPECT_EQ(epc::limits::kDefaultPendingSteps, 2u);
  for (uint32_t served = 1; served <= epc::limits::kMaxPendingSteps; ++served) {
    raw.max_pending_steps = served;
    EXPECT_EQ(status_of(raw), EPC_OK) << served;
    EXPECT_EQ(epc::resolve_config(&raw).max_pending_steps, served);
  }
  std::string msg;
  for (uint32_t more : {epc::limits::kMaxPendingSteps + 1, 0xFFFFFFFFu}) {
    raw.max_pending_steps = more;
    EXPECT_EQ(status_of(raw, &msg), EPC_ERR_UNSUPPORTED) << more;
    EXPECT_NE(msg.find("EpcGroupConfig"), std::string::npos) << msg;
    EXPECT_NE(msg.find("max_pending_steps"), std::string::npos) << msg;
  }
}

TEST(Config, VirtualNodeSizeIsKeptForThePlanner) {
  EpcGroupConfig raw = minimal();
  raw.virtual_node_size = 2;  // checked against the LSA team size by the planner
  EXPECT_EQ(epc::resolve_config(&raw).virtual_node_size, 2u);
}

}  // namespace
