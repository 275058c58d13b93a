// SPDX-License-Identifier: Apache-2.0
// The ABI's struct_size/abi_version rules (core/versioned_struct.*), exercised on
// EpcGroupConfig through its resolution, and on every other extensible struct of the 2.0
// header through the generic reader and writer, as callers built against older and newer
// headers would pass them.
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
  c.abi_version = 10300;  // a caller built against the 1.3 header
  std::string msg;
  EXPECT_EQ(resolve_status(&c, &msg), EPC_ERR_ABI_MISMATCH);
  EXPECT_NE(msg.find("major 1"), std::string::npos) << msg;
  c.abi_version = (EPC_ABI_MAJOR + 1) * 10000;
  EXPECT_EQ(resolve_status(&c, &msg), EPC_ERR_ABI_MISMATCH);
  EXPECT_NE(msg.find("major " + std::to_string(EPC_ABI_MAJOR + 1)), std::string::npos) << msg;
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

// ---- Every extensible input struct of 2.0 --------------------------------------------

template <typename T>
struct Named;
#define EPC_NAMED(T, INIT)                  \
  template <>                               \
  struct Named<T> {                         \
    static constexpr const char* name = #T; \
    static T init() { return INIT; }        \
  }
EPC_NAMED(EpcGroupConfig, EPC_GROUP_CONFIG_INIT);
EPC_NAMED(EpcHandleConfig, EPC_HANDLE_CONFIG_INIT);
EPC_NAMED(EpcRouting, EPC_ROUTING_INIT);
EPC_NAMED(EpcDispatchArgs, EPC_DISPATCH_ARGS_INIT);
EPC_NAMED(EpcCombineArgs, EPC_COMBINE_ARGS_INIT);
EPC_NAMED(EpcPlan, EPC_PLAN_INIT);
EPC_NAMED(EpcGroupInfo, EPC_GROUP_INFO_INIT);
EPC_NAMED(EpcHandleInfo, EPC_HANDLE_INFO_INIT);
#undef EPC_NAMED

template <typename T>
class ExtensibleStruct : public ::testing::Test {};
using InputStructs = ::testing::Types<EpcGroupConfig, EpcHandleConfig, EpcRouting, EpcDispatchArgs, EpcCombineArgs>;
using AllStructs = ::testing::Types<EpcGroupConfig, EpcHandleConfig, EpcRouting, EpcDispatchArgs, EpcCombineArgs,
                                    EpcPlan, EpcGroupInfo, EpcHandleInfo>;
template <typename T>
class ExtensibleInput : public ::testing::Test {};
TYPED_TEST_SUITE(ExtensibleInput, InputStructs);
TYPED_TEST_SUITE(ExtensibleStruct, AllStructs);

// A caller's struct of `size` bytes: the first min(size, sizeof) bytes 0x11 (a field value
// no default has), the header set, `tail` past sizeof(T).
template <typename T>
std::vector<unsigned char> caller_struct(size_t size, unsigned char tail = 0) {
  std::vector<unsigned char> bytes(size < sizeof(T) ? sizeof(T) : size, tail);
  std::memset(bytes.data(), 0x11, sizeof(T));
  const uint32_t header[2] = {static_cast<uint32_t>(size), EPC_ABI_VERSION};
  std::memcpy(bytes.data(), header, sizeof header);
  return bytes;
}

template <typename T>
EpcStatus read_status(const std::vector<unsigned char>& bytes, T* out, std::string* message) {
  try {
    *out = epc::read_versioned(reinterpret_cast<const T*>(bytes.data()), Named<T>::name);
    return EPC_OK;
  } catch (const epc::Error& e) {
    *message = e.what();
    return e.status();
  }
}

TYPED_TEST(ExtensibleStruct, StartsWithTheVersionedHeader) {
  using T = TypeParam;
  EXPECT_EQ(offsetof(T, struct_size), 0u);
  EXPECT_EQ(offsetof(T, abi_version), 4u);
  const T value = Named<T>::init();
  EXPECT_EQ(value.struct_size, sizeof(T));
  EXPECT_EQ(value.abi_version, EPC_ABI_VERSION);
}

TYPED_TEST(ExtensibleInput, ShorterStructGetsZerosForTheTail) {
  using T = TypeParam;
  // Every 8-byte boundary past the header: the caller's bytes, then zeros (the defaults).
  for (size_t size = 8; size < sizeof(T); size += 8) {
    auto bytes = caller_struct<T>(size);
    T value;
    std::string msg;
    ASSERT_EQ(read_status(bytes, &value, &msg), EPC_OK) << Named<T>::name << " size " << size << ": " << msg;
    const unsigned char* got = reinterpret_cast<const unsigned char*>(&value);
    for (size_t i = 8; i < sizeof(T); ++i) {
      ASSERT_EQ(got[i], i < size ? 0x11 : 0) << Named<T>::name << " size " << size << " byte " << i;
    }
  }
}

TYPED_TEST(ExtensibleInput, SizeInsideAFieldIsAnAbiMismatch) {
  using T = TypeParam;
  // 4 bytes past an 8-byte boundary ends inside a pointer or a uint64, shorter or longer.
  for (size_t size = 12; size < sizeof(T) + 16; size += 8) {
    auto bytes = caller_struct<T>(size);
    T value;
    std::string msg;
    ASSERT_EQ(read_status(bytes, &value, &msg), EPC_ERR_ABI_MISMATCH) << Named<T>::name << " size " << size;
    EXPECT_NE(msg.find("struct_size is " + std::to_string(size) + ", which ends inside a field"), std::string::npos)
        << msg;
  }
}

TYPED_TEST(ExtensibleInput, LongerStructWithZeroTailIsAccepted) {
  using T = TypeParam;
  auto bytes = caller_struct<T>(sizeof(T) + 24);
  T value;
  std::string msg;
  EXPECT_EQ(read_status(bytes, &value, &msg), EPC_OK) << msg;
  EXPECT_EQ(std::memcmp(&value, bytes.data(), sizeof(T)), 0);
}

TYPED_TEST(ExtensibleInput, LongerStructWithNonZeroTailIsAnAbiMismatchNamingTheByte) {
  using T = TypeParam;
  for (size_t at : {sizeof(T), sizeof(T) + 23}) {
    auto bytes = caller_struct<T>(sizeof(T) + 24);
    bytes[at] = 0x80;
    T value;
    std::memset(&value, 0x77, sizeof value);
    std::string msg;
    EXPECT_EQ(read_status(bytes, &value, &msg), EPC_ERR_ABI_MISMATCH) << Named<T>::name << " byte " << at;
    EXPECT_NE(msg.find(Named<T>::name), std::string::npos) << msg;
    EXPECT_NE(msg.find("byte " + std::to_string(at)), std::string::npos) << msg;
  }
}

TYPED_TEST(ExtensibleInput, HeaderRules) {
  using T = TypeParam;
  T value;
  std::string msg;
  for (uint32_t size : {0u, 4u, 7u}) {
    auto bytes = caller_struct<T>(sizeof(T));
    std::memcpy(bytes.data(), &size, 4);
    EXPECT_EQ(read_status(bytes, &value, &msg), EPC_ERR_ABI_MISMATCH) << size;
    EXPECT_NE(msg.find(std::string(Named<T>::name) + ".struct_size"), std::string::npos) << msg;
  }
  for (uint32_t version : {0u, 10300u, static_cast<uint32_t>((EPC_ABI_MAJOR + 1) * 10000)}) {
    auto bytes = caller_struct<T>(sizeof(T));
    std::memcpy(bytes.data() + 4, &version, 4);
    EXPECT_EQ(read_status(bytes, &value, &msg), EPC_ERR_ABI_MISMATCH) << version;
    EXPECT_NE(msg.find(std::string(Named<T>::name) + ".abi_version"), std::string::npos) << msg;
  }
  // A later minor of this major is fine (its tail rules apply).
  auto bytes = caller_struct<T>(sizeof(T));
  const uint32_t later = EPC_ABI_VERSION + 100;
  std::memcpy(bytes.data() + 4, &later, 4);
  EXPECT_EQ(read_status(bytes, &value, &msg), EPC_OK) << msg;
}

TYPED_TEST(ExtensibleStruct, OutputIsWrittenOnlyUpToTheCallersSize) {
  using T = TypeParam;
  T value;
  std::memset(&value, 0x33, sizeof value);
  // An older caller's struct (half of it), then a newer one's (24 bytes longer).
  for (size_t size : {sizeof(T) / 2 / 4 * 4, sizeof(T) + 24}) {
    std::vector<unsigned char> bytes(sizeof(T) + 32, 0xAB);
    const uint32_t header[2] = {static_cast<uint32_t>(size), EPC_ABI_VERSION - 1};
    std::memcpy(bytes.data(), header, sizeof header);
    epc::write_versioned(value, reinterpret_cast<T*>(bytes.data()), Named<T>::name);
    uint32_t after[2];
    std::memcpy(after, bytes.data(), sizeof after);
    EXPECT_EQ(after[0], header[0]);  // the caller's header is kept
    EXPECT_EQ(after[1], header[1]);
    for (size_t i = 8; i < bytes.size(); ++i) {
      const unsigned char expected = i < size ? (i < sizeof(T) ? 0x33 : 0) : 0xAB;
      ASSERT_EQ(bytes[i], expected) << Named<T>::name << " size " << size << " byte " << i;
    }
  }
}

}  // namespace
