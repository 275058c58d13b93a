// SPDX-License-Identifier: Apache-2.0
// The C ABI's behaviour on bad input, through the real shared library: a specific status,
// a message naming the problem, out-parameters untouched, never a crash. None of these
// calls needs a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "epcomm/epcomm.h"

namespace {

std::string last_error() {
  size_t length = 0;
  EXPECT_EQ(epc_last_error(nullptr, 0, &length), EPC_OK);
  std::string text(length + 1, '\0');
  EXPECT_EQ(epc_last_error(&text[0], text.size(), nullptr), EPC_OK);
  text.resize(length);
  return text;
}

EpcGroupConfig valid_config() {
  EpcGroupConfig c = EPC_GROUP_CONFIG_INIT;
  c.num_experts = 64;
  c.hidden = 2048;
  return c;
}

EpcPlan empty_plan() {
  EpcPlan p;
  std::memset(&p, 0xAB, sizeof p);
  p.struct_size = sizeof p;
  p.abi_version = EPC_ABI_VERSION;
  return p;
}

TEST(CApi, StatusStringsAreStableAndNeverNull) {
  EXPECT_STREQ(epc_status_string(EPC_OK), "success");
  EXPECT_STREQ(epc_status_string(EPC_ERR_TIMEOUT), "timeout: a peer did not arrive");
  for (EpcStatus s = EPC_OK; s <= EPC_ERR_INTERNAL; ++s) {
    ASSERT_NE(epc_status_string(s), nullptr);
    EXPECT_STRNE(epc_status_string(s), "unknown status") << s;
  }
  EXPECT_STREQ(epc_status_string(-1), "unknown status");
  EXPECT_STREQ(epc_status_string(12345), "unknown status");
}

TEST(CApi, VersionMatchesHeader) {
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
  EpcPlan plan = empty_plan();
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

TEST(CApi, PlanQueryDescribesTheWindow) {
  EpcGroupConfig c = valid_config();
  EpcPlan plan = empty_plan();
  ASSERT_EQ(epc_plan_query(&c, 4, 4, 1, &plan), EPC_OK) << last_error();
  EXPECT_EQ(plan.struct_size, sizeof plan);
  EXPECT_EQ(plan.mode, static_cast<EpcMode>(EPC_MODE_LOW_LATENCY));
  EXPECT_EQ(plan.num_slots, 2u);
  ASSERT_EQ(plan.num_regions, 9u);
  EXPECT_STREQ(plan.regions[0].name, "control");
  EXPECT_STREQ(plan.regions[1].name, "dispatch_recv[0]");
  EXPECT_EQ(plan.regions[1].slot, 0u);
  EXPECT_EQ(plan.regions[0].slot, EPC_SLOT_NONE);
  const EpcPlanRegion& last = plan.regions[plan.num_regions - 1];
  EXPECT_GE(plan.symmetric_bytes, last.offset + last.size);
  // Unused entries are zeroed, not left as garbage.
  EXPECT_EQ(plan.regions[plan.num_regions].size, 0u);
}

struct BadPlanCase {
  const char* what;
  EpcStatus status;
  const char* message_part;
};

void expect_plan_rejected(const EpcGroupConfig& c, int nranks, const BadPlanCase& expected) {
  EpcPlan plan = empty_plan();
  EpcPlan before = plan;
  EXPECT_EQ(epc_plan_query(&c, nranks, nranks, 1, &plan), expected.status) << expected.what;
  EXPECT_NE(last_error().find(expected.message_part), std::string::npos) << expected.what << ": " << last_error();
  EXPECT_EQ(std::memcmp(&plan, &before, sizeof plan), 0) << expected.what << ": output written";
}

TEST(CApi, PlanQueryRejectsBadConfigs) {
  EpcGroupConfig c = valid_config();
  c.hidden = 0;
  expect_plan_rejected(c, 4, {"zero hidden", EPC_ERR_INVALID_ARGUMENT, "hidden"});
  c = valid_config();
  expect_plan_rejected(c, 3, {"experts % ranks", EPC_ERR_INVALID_ARGUMENT, "divisible"});
  c.dtype = EPC_DTYPE_INT64;
  expect_plan_rejected(c, 4, {"dtype", EPC_ERR_UNSUPPORTED, "dtype"});
  c = valid_config();
  c.struct_size = 3;
  expect_plan_rejected(c, 4, {"struct_size", EPC_ERR_ABI_MISMATCH, "struct_size"});
  c = valid_config();
  c.abi_version = 90000;
  expect_plan_rejected(c, 4, {"abi_version", EPC_ERR_ABI_MISMATCH, "abi_version"});
  c = valid_config();
  expect_plan_rejected(c, 0, {"no ranks", EPC_ERR_INVALID_ARGUMENT, "nranks"});
}

TEST(CApi, PlanQueryRejectsNullAndBadOutput) {
  EpcGroupConfig c = valid_config();
  EXPECT_EQ(epc_plan_query(&c, 4, 4, 1, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("EpcPlan"), std::string::npos);
  EpcPlan plan = empty_plan();
  EXPECT_EQ(epc_plan_query(nullptr, 4, 4, 1, &plan), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("EpcGroupConfig"), std::string::npos);
  plan.struct_size = 0;
  EXPECT_EQ(epc_plan_query(&c, 4, 4, 1, &plan), EPC_ERR_ABI_MISMATCH);
}

TEST(CApi, PlanQueryWritesOnlyTheCallersPrefix) {
  EpcGroupConfig c = valid_config();
  unsigned char buffer[sizeof(EpcPlan)];
  std::memset(buffer, 0xCD, sizeof buffer);
  EpcPlan* plan = reinterpret_cast<EpcPlan*>(buffer);
  plan->struct_size = 24;  // an old caller that knows only up to symmetric_bytes
  plan->abi_version = EPC_ABI_VERSION;
  ASSERT_EQ(epc_plan_query(&c, 2, 2, 1, plan), EPC_OK) << last_error();
  EXPECT_GT(plan->symmetric_bytes, 0u);
  EXPECT_EQ(buffer[24], 0xCD);
  EXPECT_EQ(plan->struct_size, 24u);
}

TEST(CApi, GroupCallsRejectNullAndBadConfigBeforeTouchingAGpu) {
  EpcGroupConfig c = valid_config();
  EpcGroup* group = reinterpret_cast<EpcGroup*>(0x1);
  EXPECT_EQ(epc_group_create(nullptr, &c, &group), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("comm is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(group, reinterpret_cast<EpcGroup*>(0x1));  // untouched on failure
  EXPECT_EQ(epc_group_create(nullptr, &c, nullptr), EPC_ERR_INVALID_ARGUMENT);
  c.hidden = 12;  // 24-byte rows
  EXPECT_EQ(epc_group_create(nullptr, &c, &group), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("hidden"), std::string::npos) << last_error();
  EXPECT_EQ(epc_group_create(nullptr, nullptr, &group), EPC_ERR_INVALID_ARGUMENT);

  EXPECT_EQ(epc_group_destroy(nullptr), EPC_OK);
  EpcGroupInfo info;
  info.struct_size = sizeof info;
  info.abi_version = EPC_ABI_VERSION;
  EXPECT_EQ(epc_group_query(nullptr, &info), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(epc_group_barrier(nullptr, nullptr), EPC_ERR_INVALID_ARGUMENT);
}

TEST(CApi, AsyncErrorRejectsNullAndObjectsThatAreNotLiveGroups) {
  EXPECT_EQ(epc_group_async_error(nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("group is NULL"), std::string::npos) << last_error();
  // Zeroed memory (what a destroyed group's magic word becomes) and another object's bytes
  // are refused by the magic word, never read as a group's error record.
  uint64_t zeroed[8] = {};
  EXPECT_EQ(epc_group_async_error(reinterpret_cast<const EpcGroup*>(zeroed)), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("not a live EpcGroup"), std::string::npos) << last_error();
  uint64_t not_a_group[8] = {0x6c646e6148435045ull, 2, 3, 4, 5, 6, 7, 8};  // a handle's magic
  EXPECT_EQ(epc_group_async_error(reinterpret_cast<const EpcGroup*>(not_a_group)), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("not a live EpcGroup"), std::string::npos) << last_error();
  // Like every call, it clears the thread's message on entry.
  EXPECT_EQ(epc_get_version(nullptr, nullptr, nullptr), EPC_OK);
  EXPECT_EQ(last_error(), "");
}

TEST(CApi, BootstrapRejectsBadArguments) {
  EXPECT_EQ(epc_unique_id_create(nullptr), EPC_ERR_INVALID_ARGUMENT);
  EpcUniqueId id;
  std::memset(&id, 0, sizeof id);
  void* comm = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(epc_comm_init(nullptr, 2, 0, 0, &comm), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(epc_comm_init(&id, 0, 0, 0, &comm), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("nranks"), std::string::npos);
  EXPECT_EQ(epc_comm_init(&id, 2, 2, 0, &comm), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("rank is 2"), std::string::npos);
  EXPECT_EQ(epc_comm_init(&id, 2, 0, 0, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(comm, reinterpret_cast<void*>(0x1));
  EXPECT_EQ(epc_comm_destroy(nullptr), EPC_OK);
}

TEST(CApi, FunctionTable) {
  EpcApi api;
  std::memset(&api, 0, sizeof api);
  api.struct_size = sizeof api;
  EXPECT_EQ(epc_get_api(EPC_ABI_MAJOR + 1, &api), EPC_ERR_ABI_MISMATCH);
  EXPECT_EQ(epc_get_api(EPC_ABI_MAJOR, nullptr), EPC_ERR_INVALID_ARGUMENT);
  api.struct_size = 0;
  EXPECT_EQ(epc_get_api(EPC_ABI_MAJOR, &api), EPC_ERR_ABI_MISMATCH);
  api.struct_size = sizeof api;
  ASSERT_EQ(epc_get_api(EPC_ABI_MAJOR, &api), EPC_OK);
  EXPECT_EQ(api.struct_size, sizeof api);
  EXPECT_EQ(api.abi_version, EPC_ABI_VERSION);
  EXPECT_EQ(api.plan_query, &epc_plan_query);
  EXPECT_EQ(api.group_barrier, &epc_group_barrier);
  // The ABI 1.3 entry, appended at the end of the table.
  EXPECT_EQ(api.group_async_error, &epc_group_async_error);
  EXPECT_EQ(offsetof(EpcApi, group_async_error) + sizeof api.group_async_error, sizeof(EpcApi));
  EXPECT_EQ(api.group_async_error(nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(api.status_string(EPC_ERR_NCCL), "NCCL error");

  // An older caller knowing only the first three entries gets exactly those.
  unsigned char buffer[sizeof(EpcApi)];
  std::memset(buffer, 0xEE, sizeof buffer);
  EpcApi* old = reinterpret_cast<EpcApi*>(buffer);
  const uint32_t old_size = static_cast<uint32_t>(offsetof(EpcApi, unique_id_create));
  old->struct_size = old_size;
  ASSERT_EQ(epc_get_api(EPC_ABI_MAJOR, old), EPC_OK);
  EXPECT_EQ(old->get_version, &epc_get_version);
  EXPECT_EQ(buffer[old_size], 0xEE);

  // An ABI 1.2 caller's table ends before the 1.3 entry: nothing past it is written.
  std::memset(buffer, 0xEE, sizeof buffer);
  const uint32_t v12_size = static_cast<uint32_t>(offsetof(EpcApi, group_async_error));
  old->struct_size = v12_size;
  ASSERT_EQ(epc_get_api(EPC_ABI_MAJOR, old), EPC_OK);
  EXPECT_EQ(old->ht_combine, &epc_ht_combine);
  EXPECT_EQ(old->struct_size, sizeof(EpcApi));  // the library says how long its table is
  for (size_t i = v12_size; i < sizeof buffer; ++i) EXPECT_EQ(buffer[i], 0xEE) << i;
}

}  // namespace

namespace {

TEST(CApi, HandleAndLowLatencyCallsRejectNullHandles) {
  EpcTensor t;
  std::memset(&t, 0, sizeof t);
  EpcHandle* handle = reinterpret_cast<EpcHandle*>(0x1);
  EXPECT_EQ(epc_handle_create(nullptr, &t, nullptr, &handle), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("group is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(handle, reinterpret_cast<EpcHandle*>(0x1));
  EXPECT_EQ(epc_handle_update(nullptr, &t, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("handle is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(epc_handle_destroy(nullptr), EPC_OK);
  EXPECT_EQ(epc_ll_dispatch(nullptr, &t, &t, &t, &t, 0, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(epc_ll_combine(nullptr, &t, &t, 0, nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(epc_complete(nullptr, nullptr), EPC_ERR_INVALID_ARGUMENT);
  // A pointer that is not a live handle is refused by its magic word, not dereferenced blindly.
  uint64_t not_a_handle[4] = {1, 2, 3, 4};
  EXPECT_EQ(epc_complete(reinterpret_cast<EpcHandle*>(not_a_handle), nullptr), EPC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("not a live EpcHandle"), std::string::npos) << last_error();
}

}  // namespace
