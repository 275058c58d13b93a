// SPDX-License-Identifier: Apache-2.0
// The per-call SM budget of the sending launch (EpcDispatchArgs / EpcCombineArgs .send_sms,
// ABI 2.1): on high-throughput and low-latency groups, fused and split by
// EPC_STEP_SEND_ONLY, budgets of 1 and 4 SMs and the default give outputs equal to the CPU
// reference model bit for bit; a budget above the group's num_sms or the GPU's SM count is
// refused with EPC_ERR_INVALID_ARGUMENT naming the field, and nothing is queued; a 2.0
// caller's shorter structs get the default.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest {
namespace {

constexpr uint32_t kBudgets[] = {1, 4, 0};

std::string budget_label(uint32_t send_sms, bool send_only) {
  return (send_sms == 0 ? std::string("default budget") : std::to_string(send_sms) + " SMs") +
         (send_only ? ", send-only + complete" : ", fused");
}

::testing::AssertionResult complete_if(bool send_only, EpcHandle* handle, cudaStream_t s) {
  return send_only ? epc_ok(epc_complete(handle, 0, s), "epc_complete") : ::testing::AssertionSuccess();
}

TEST(SendSms, HighThroughputOutputsAtAnyBudget) {
  constexpr int K = 8;
  const ht::HtShape shape = world_shape(8, 2048, 256, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  ht::HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  const ht::CallOptions options;
  HandlePtr handle;
  uint64_t seed = 54000;
  for (bool send_only : {false, true}) {
    for (uint32_t budget : kBudgets) {
      const std::string label = "HT, " + budget_label(budget, send_only);
      const ht::HtStep step = ht::make_step(ht::make_problem(shape, ht::random_spec(K, seed)), seed + 1, my_rank());
      seed += 10;
      ASSERT_TRUE(buffers.upload(step, options, s));
      if (handle == nullptr) {
        ASSERT_TRUE(ht::create_handle(group.get(), buffers, EPC_SIZING_CAPACITY, s, handle));
      } else {
        ASSERT_TRUE(ht::update_handle(handle.get(), buffers, s));
      }
      const uint32_t flags = send_only ? EPC_STEP_SEND_ONLY : 0;
      ASSERT_TRUE(epc_ok(ht::call_dispatch(handle.get(), buffers, s, flags, budget), label + ": dispatch"));
      ASSERT_TRUE(complete_if(send_only, handle.get(), s));
      ASSERT_TRUE(epc_ok(ht::call_combine(handle.get(), buffers, s, flags, budget), label + ": combine"));
      ASSERT_TRUE(complete_if(send_only, handle.get(), s));
      buffers.check(step, s, label);
    }
  }
}

TEST(SendSms, LowLatencyOutputsAtAnyBudget) {
  constexpr int K = 8;
  const ll::LlShape shape = world_shape(8, 2048, 64, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  ll::LlBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  HandlePtr handle;
  uint64_t seed = 55000;
  for (bool send_only : {false, true}) {
    for (uint32_t budget : kBudgets) {
      const std::string label = "LL, " + budget_label(budget, send_only);
      const ll::LlStep step = ll::make_step(ll::random_problem(shape, K, seed, true, 0.1), seed + 1, my_rank());
      seed += 10;
      ASSERT_TRUE(buffers.upload(step, s));
      if (handle == nullptr) {
        ASSERT_TRUE(ll::create_handle(group.get(), buffers, s, handle));
      } else {
        ASSERT_TRUE(ll::update_handle(handle.get(), buffers, s));
      }
      const uint32_t flags = send_only ? EPC_STEP_SEND_ONLY : 0;
      ASSERT_TRUE(epc_ok(ll::call_dispatch(handle.get(), buffers, flags, s, budget), label + ": dispatch"));
      ASSERT_TRUE(complete_if(send_only, handle.get(), s));
      ASSERT_TRUE(epc_ok(ll::call_combine(handle.get(), buffers, flags, s, budget), label + ": combine"));
      ASSERT_TRUE(complete_if(send_only, handle.get(), s));
      buffers.check(step, s, label);
    }
  }
}

void expect_refused(EpcStatus status, const std::string& part, const std::string& what) {
  const std::string message = last_error();
  EXPECT_EQ(status, EPC_ERR_INVALID_ARGUMENT) << what << ": " << message;
  EXPECT_NE(message.find(part), std::string::npos)
      << what << ": the message should say \"" << part << "\": " << message;
}

// On a high-throughput group whose num_sms (1024) exceeds the GPU's SM count: one SM more
// than the GPU has is refused naming the GPU's count, the GPU's count itself is served; and
// on a default group (num_sms 24), 25 is refused naming num_sms. The handle stays usable.
TEST(SendSms, BudgetsBeyondTheGroupOrTheGpuAreRefused) {
  constexpr int K = 4;
  const ht::HtShape shape = world_shape(4, 1024, 64, K);
  int device = 0, gpu_sms = 0;
  ASSERT_TRUE(cuda_ok(cudaGetDevice(&device), "cudaGetDevice"));
  ASSERT_TRUE(cuda_ok(cudaDeviceGetAttribute(&gpu_sms, cudaDevAttrMultiProcessorCount, device), "SM count"));
  EpcGroupConfig config = group_config(shape, EPC_MODE_HIGH_THROUGHPUT);
  config.num_sms = 1024;
  EpcGroup* raw = nullptr;
  ASSERT_TRUE(epc_ok(epc_group_create(context().comm, &config, &raw), "epc_group_create(HT, num_sms 1024)"));
  GroupPtr wide(raw), plain;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, plain));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  ht::HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  const ht::HtStep step = ht::make_step(ht::make_problem(shape, ht::random_spec(K, 56000)), 56001, my_rank());
  ASSERT_TRUE(buffers.upload(step, ht::CallOptions{}, s));
  HandlePtr wide_handle, plain_handle;
  ASSERT_TRUE(ht::create_handle(wide.get(), buffers, EPC_SIZING_CAPACITY, s, wide_handle));
  ASSERT_TRUE(ht::create_handle(plain.get(), buffers, EPC_SIZING_CAPACITY, s, plain_handle));
  const uint32_t over = static_cast<uint32_t>(gpu_sms) + 1;
  const std::string gpu = std::to_string(gpu_sms) + " SMs of the group's GPU";
  expect_refused(ht::call_dispatch(wide_handle.get(), buffers, s, 0, over), gpu, "dispatch, send_sms = GPU + 1");
  expect_refused(ht::call_combine(wide_handle.get(), buffers, s, EPC_STEP_SEND_ONLY, over), gpu,
                 "send-only combine, send_sms = GPU + 1");
  expect_refused(ht::call_dispatch(plain_handle.get(), buffers, s, 0, 25), "EpcGroupConfig.num_sms (24)",
                 "dispatch, send_sms 25 on num_sms 24");
  expect_refused(ht::call_combine(plain_handle.get(), buffers, s, 0, 25), "EpcCombineArgs.send_sms",
                 "combine, send_sms 25 on num_sms 24");
  EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
  ASSERT_TRUE(query_handle(wide_handle.get(), info));
  EXPECT_EQ(info.pending, static_cast<uint32_t>(EPC_PENDING_NONE)) << "a refused send-only call left a step pending";
  const uint32_t all = static_cast<uint32_t>(gpu_sms);
  ASSERT_TRUE(epc_ok(ht::call_dispatch(wide_handle.get(), buffers, s, 0, all), "dispatch, send_sms = the GPU's"));
  ASSERT_TRUE(epc_ok(ht::call_combine(wide_handle.get(), buffers, s, 0, all), "combine, send_sms = the GPU's"));
  buffers.check(step, s, "HT at the GPU's SM count on a group of num_sms 1024");
}

// A 2.0 caller's EpcDispatchArgs and EpcCombineArgs (struct_size up to 2.0's last field,
// abi_version 2.0.0) through the 2.1 library: the bytes where 2.1's send_sms and reserved0
// lie hold garbage that 2.1 would refuse, are not read, and the step is exact.
TEST(SendSms, A20CallersStructsGetTheDefaults) {
  constexpr int K = 8;
  const ht::HtShape shape = world_shape(8, 2048, 128, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  ht::HtBuffers buffers;
  ASSERT_TRUE(buffers.allocate(shape, K));
  const ht::CallOptions options = ht::payload_only();
  const ht::HtStep step = ht::make_step(ht::make_problem(shape, ht::random_spec(K, 57000)), 57001, my_rank());
  ASSERT_TRUE(buffers.upload(step, options, s));
  HandlePtr handle;
  ASSERT_TRUE(ht::create_handle(group.get(), buffers, EPC_SIZING_EXACT, s, handle));
  const EpcTensor x = buffers.x(), out_x = buffers.out_x(), y = buffers.combine_x(), out = buffers.out();
  EpcDispatchArgs d = EPC_DISPATCH_ARGS_INIT;
  d.struct_size = static_cast<uint32_t>(offsetof(EpcDispatchArgs, send_sms));  // 2.0's sizeof
  d.abi_version = 20000;
  d.x = &x;
  d.out_x = &out_x;
  d.send_sms = 0xFFFFFFFFu;
  d.reserved0 = 0xFFFFFFFFu;
  ASSERT_TRUE(epc_ok(epc_dispatch(handle.get(), &d, s), "epc_dispatch with a 2.0 struct"));
  EpcCombineArgs c = EPC_COMBINE_ARGS_INIT;
  c.struct_size = static_cast<uint32_t>(offsetof(EpcCombineArgs, send_sms));
  c.abi_version = 20000;
  c.x = &y;
  c.out = &out;
  c.send_sms = 0xFFFFFFFFu;
  c.reserved0 = 0xFFFFFFFFu;
  ASSERT_TRUE(epc_ok(epc_combine(handle.get(), &c, s), "epc_combine with a 2.0 struct"));
  buffers.check(step, s, "2.0-sized argument structs");
}

}  // namespace
}  // namespace epc::gputest
