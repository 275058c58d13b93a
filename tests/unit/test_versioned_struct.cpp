// SPDX-License-Identifier: Apache-2.0
// The ABI's struct_size/abi_version rules (core/versioned_struct.*), exercised on
// EpcGroupConfig as a caller built against older and newer headers would pass it.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/versioned_struct.hpp"

namespace {

EpcStatus resolve_status(const void* bytes, std::string* message = nullptr) {
  try {
    epc::resolve_config(static_cast<const EpcGroupConfig*>(bytes));
    return EPC_OK;
  } catch (const epc::Error& e) {
    if (message != nullptr) *message = e.what();
    return e.status();
  }
}

// A buffer holding a config of `size` bytes: the first min(size, sizeof) from `c`.
std::vector<unsigned char> as_caller_bytes(const EpcGroupConfig& c, size_t size) {
  std::vector<unsigned char> bytes(size + 8, 0);
  std::memcpy(bytes.data(), &c, size < sizeof c ? size : sizeof c);
  uint32_t s = static_cast<uint32_t>(size);
  std::memcpy(bytes.data(), &s, sizeof s);
  return bytes;
}

EpcGroupConfig full() {
  EpcGroupConfig c = EPC_GROUP_CONFIG_INIT;
  c.num_experts = 64;
  c.hidden = 4096;
  c.max_tokens_per_rank = 200;
  c.timeout_ms = 777;
  return c;
}

TEST(VersionedStruct, ShorterStructGetsDefaultsForTheTail) {
  // An older caller whose struct ends right after max_topk: the fields after it default.
  size_t short_size = offsetof(EpcGroupConfig, num_sms);
  EpcGroupConfig c = full();
  c.num_sms = 99;  // beyond the short struct: must be ignored
  auto bytes = as_caller_bytes(c, short_size);
  epc::GroupConfig r = epc::resolve_config(reinterpret_cast<const EpcGroupConfig*>(bytes.data()));
  EXPECT_EQ(r.num_experts, 64u);
  EXPECT_EQ(r.hidden, 4096u);
  EXPECT_EQ(r.max_tokens_per_rank, 200u);
  EXPECT_EQ(r.num_sms, 132u);
  EXPECT_EQ(r.timeout_ms, 10000u);
}

TEST(VersionedStruct, StructTooShortToHoldRequiredFieldsFailsOnThem) {
  // Only the header: every field defaults, so the required ones are reported missing.
  EpcGroupConfig c = full();
  auto bytes = as_caller_bytes(c, 8);
  std::string msg;
  EXPECT_EQ(resolve_status(bytes.data(), &msg), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("num_experts"), std::string::npos) << msg;
}

TEST(VersionedStruct, LongerStructWithZeroTailIsAccepted) {
  EpcGroupConfig c = full();
  auto bytes = as_caller_bytes(c, sizeof c + 8);
  EXPECT_EQ(resolve_status(bytes.data()), EPC_OK);
}

TEST(VersionedStruct, LongerStructWithNonZeroTailIsRejectedWithOffset) {
  EpcGroupConfig c = full();
  auto bytes = as_caller_bytes(c, sizeof c + 8);
  bytes[sizeof c + 3] = 1;
  std::string msg;
  EXPECT_EQ(resolve_status(bytes.data(), &msg), EPC_ERR_ABI_MISMATCH);
  EXPECT_NE(msg.find("EpcGroupConfig"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte " + std::to_string(sizeof c + 3)), std::string::npos) << msg;
}

TEST(VersionedStruct, StructSizeBelowHeaderIsRejected) {
  EpcGroupConfig c = full();
  c.struct_size = 4;
  EXPECT_EQ(resolve_status(&c), EPC_ERR_ABI_MISMATCH);
  c.struct_size = 0;
  EXPECT_EQ(resolve_status(&c), EPC_ERR_ABI_MISMATCH);
}

TEST(VersionedStruct, OtherAbiMajorIsRejected) {
  EpcGroupConfig c = full();
  c.abi_version = 2 * 10000;
  std::string msg;
  EXPECT_EQ(resolve_status(&c, &msg), EPC_ERR_ABI_MISMATCH);
  EXPECT_NE(msg.find("major 2"), std::string::npos) << msg;
  c.abi_version = 0;
  EXPECT_EQ(resolve_status(&c), EPC_ERR_ABI_MISMATCH);
  c.abi_version = EPC_ABI_VERSION + 1;  // a newer minor/patch of the same major is fine
  EXPECT_EQ(resolve_status(&c), EPC_OK);
}

TEST(VersionedStruct, NullIsAnArgumentError) { EXPECT_EQ(resolve_status(nullptr), EPC_ERR_INVALID_ARGUMENT); }

TEST(VersionedStruct, OutputStructIsWrittenOnlyUpToCallerSize) {
  struct Out {
    uint32_t struct_size, abi_version, a, b;
  };
  Out value{sizeof(Out), EPC_ABI_VERSION, 11, 22};
  unsigned char buffer[sizeof(Out) + 8];
  std::memset(buffer, 0xAB, sizeof buffer);
  uint32_t short_size = 12, version = EPC_ABI_VERSION;
  std::memcpy(buffer, &short_size, 4);
  std::memcpy(buffer + 4, &version, 4);
  epc::write_versioned(value, reinterpret_cast<Out*>(buffer), "Out");
  uint32_t a = 0;
  std::memcpy(&a, buffer + 8, 4);
  EXPECT_EQ(a, 11u);
  EXPECT_EQ(buffer[12], 0xAB);  // `b` lies past the caller's struct: untouched
  uint32_t size_after = 0;
  std::memcpy(&size_after, buffer, 4);
  EXPECT_EQ(size_after, 12u);
}

}  // namespace
