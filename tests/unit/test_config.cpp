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

TEST(Config, UnknownFlagsAreRejected) {
  EpcGroupConfig raw = minimal();
  raw.flags = 1;
  EXPECT_EQ(status_of(raw), EPC_ERR_INVALID_ARGUMENT);
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

TEST(Config, TokenDtypes) {
  EpcGroupConfig raw = minimal();
  EXPECT_EQ(epc::resolve_config(&raw).dtype, static_cast<EpcDtype>(EPC_DTYPE_BF16));
  raw.dtype = EPC_DTYPE_FP16;
  EXPECT_EQ(status_of(raw), EPC_OK);
  raw.dtype = EPC_DTYPE_FP8_E4M3;
  EXPECT_EQ(status_of(raw), EPC_OK);
  std::string msg;
  raw.dtype = EPC_DTYPE_FP32;
  EXPECT_EQ(status_of(raw, &msg), EPC_ERR_UNSUPPORTED);
  EXPECT_NE(msg.find("fp32"), std::string::npos) << msg;
  raw.dtype = 77;
  EXPECT_EQ(status_of(raw), EPC_ERR_UNSUPPORTED);
}

TEST(Config, Fp8NeedsWholeScaleBlocks) {
  EpcGroupConfig raw = minimal();
  raw.dtype = EPC_DTYPE_FP8_E4M3;
  raw.hidden = 2880;  // 22.5 blocks of 128
  std::string msg;
  EXPECT_EQ(status_of(raw, &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("128"), std::string::npos) << msg;
}

TEST(Config, VirtualNodeSizeIsKeptForThePlanner) {
  EpcGroupConfig raw = minimal();
  raw.virtual_node_size = 2;  // checked against the LSA team size by the planner
  EXPECT_EQ(epc::resolve_config(&raw).virtual_node_size, 2u);
}

}  // namespace
