// SPDX-License-Identifier: Apache-2.0
// Calls out of order on real GPUs: EPC_ERR_INVALID_USAGE for a step on a handle without
// routing, epc_complete with nothing pending, a second step (or an update) on a handle with
// a send-only half pending, and (HT, 2.1) a step of the operation pending on another handle.
// LL groups serve another handle's steps beside a pending one (max_pending_steps 2 by default;
// test_ll_micro_batches.cpp checks the limit). A failing call changes nothing: the query says the same before and
// after, a refused epc_handle_create takes no handle id, and the next correct calls give results equal to the CPU
// reference model. Every rank makes the same failing calls (they fail before anything is queued), so the collective
// steps stay aligned.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest {
namespace {

// `status` must be `want` with a message containing `part`; call it directly on the result.
void expect_status(EpcStatus status, EpcStatus want, const std::string& part, const std::string& what) {
  const std::string message = last_error();
  EXPECT_EQ(status, want) << what << ": got " << epc_status_string(status) << ": " << message;
  EXPECT_NE(message.find(part), std::string::npos)
      << what << ": the message should mention \"" << part << "\": " << message;
}
void expect_usage(EpcStatus status, const std::string& part, const std::string& what) {
  expect_status(status, EPC_ERR_INVALID_USAGE, part, what);
}

uint32_t pending_of(const EpcHandle* handle) {
  EpcHandleInfo info{};
  EXPECT_TRUE(query_handle(handle, info));
  return info.pending;
}

// ---- Before any routing -------------------------------------------------------------------

// Dispatch and combine on handles created without routing, in both modes and both HT
// sizings, and (LL) a combine with no dispatch since the last routing; then the handles are
// routed and give exact results.
TEST(CallOrder, StepsBeforeAnyRoutingAreRefused) {
  constexpr int K = 4;
  const Shape shape = world_shape(8, 1024, 32, K);
  GroupPtr ll_group, ht_group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, ll_group));
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, ht_group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();

  ll::LlBuffers ll_buffers;
  ASSERT_TRUE(ll_buffers.allocate(shape, K));
  const ll::LlStep ll_step = ll::make_step(ll::random_problem(shape, K, 99000, true, 0.1), 99001, my_rank());
  ASSERT_TRUE(ll_buffers.upload(ll_step, s));
  HandlePtr ll_handle;
  ASSERT_TRUE(create_handle_with(ll_group.get(), handle_config(), nullptr, s, ll_handle, "LL handle, no routing"));
  expect_usage(ll::call_dispatch(ll_handle.get(), ll_buffers, 0, s), "routing", "LL dispatch before routing");
  expect_usage(ll::call_dispatch(ll_handle.get(), ll_buffers, EPC_STEP_SEND_ONLY, s), "routing",
               "LL send-only dispatch before routing");
  expect_usage(ll::call_combine(ll_handle.get(), ll_buffers, 0, s), "routing", "LL combine before routing");
  expect_usage(epc_complete(ll_handle.get(), 0, s), "nothing pending", "LL complete before routing");
  EXPECT_EQ(pending_of(ll_handle.get()), static_cast<uint32_t>(EPC_PENDING_NONE));
  ASSERT_TRUE(ll::update_handle(ll_handle.get(), ll_buffers, s));
  // Routed, but nothing dispatched since: a combine would walk no step's received rows (2.2).
  expect_usage(ll::call_combine(ll_handle.get(), ll_buffers, 0, s), "call epc_dispatch first",
               "LL combine before any dispatch");
  ASSERT_TRUE(ll::dispatch_and_combine(ll_handle.get(), ll_buffers, s));
  ll_buffers.check(ll_step, s, "LL after the refused calls");
  // A new routing wants its own dispatch before a combine, as HT EXPERT_PACKED handles do.
  ASSERT_TRUE(ll_buffers.upload(ll_step, s));  // fresh poison
  ASSERT_TRUE(ll::update_handle(ll_handle.get(), ll_buffers, s));
  expect_usage(ll::call_combine(ll_handle.get(), ll_buffers, EPC_STEP_SEND_ONLY, s), "call epc_dispatch first",
               "LL send-only combine after an update");
  EXPECT_EQ(pending_of(ll_handle.get()), static_cast<uint32_t>(EPC_PENDING_NONE));
  ASSERT_TRUE(ll::dispatch_and_combine(ll_handle.get(), ll_buffers, s));
  ll_buffers.check(ll_step, s, "LL after a combine refused for want of a dispatch");

  ht::HtBuffers ht_buffers;
  ASSERT_TRUE(ht_buffers.allocate(shape, K));
  const ht::HtStep ht_step = ht::make_step(ht::make_problem(shape, ht::random_spec(K, 99100)), 99101, my_rank());
  ASSERT_TRUE(ht_buffers.upload(ht_step, ht::CallOptions{}, s));
  for (EpcSizing sizing : {EPC_SIZING_CAPACITY, EPC_SIZING_EXACT}) {
    const std::string label = std::string("HT ") + sizing_name(sizing);
    HandlePtr handle;
    ASSERT_TRUE(create_handle_with(ht_group.get(), handle_config(sizing), nullptr, s, handle, label + ", no routing"));
    // Tensors shaped for a CAPACITY handle: the refusal must come before any shape check.
    ht_buffers.set_handle(sizing, shape.max_rows());
    expect_usage(ht::call_dispatch(handle.get(), ht_buffers, s), "routing", label + " dispatch before routing");
    expect_usage(ht::call_combine(handle.get(), ht_buffers, s), "routing", label + " combine before routing");
    ASSERT_TRUE(ht::update_handle(handle.get(), ht_buffers, s));
    EpcHandleInfo info{};
    ASSERT_TRUE(query_handle(handle.get(), info));
    ht_buffers.set_handle(sizing, info.rows);
    ASSERT_TRUE(ht::dispatch_and_combine(handle.get(), ht_buffers, s));
    ht_buffers.check(ht_step, s, label + " after the refused calls");
    ASSERT_TRUE(ht_buffers.upload(ht_step, ht::CallOptions{}, s));  // fresh poison for the next sizing
  }
}

// ---- Send-only and epc_complete -------------------------------------------------------------

// One LL group, handles A and B. Around a send-only dispatch on A: complete with nothing
// pending (A before, B during), a second dispatch or combine on A, an update of A; all
// refused, A still pending. B's whole steps run meanwhile (the default max_pending_steps 2
// leaves B a slot). Then A completes and its step and B's are exact. The same around a
// send-only combine.
TEST(CallOrder, PendingSendOnlyStepsRefuseOtherSteps) {
  constexpr int K = 4;
  const Shape shape = world_shape(8, 1024, 32, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  ll::LlOutputs outputs;
  outputs.counts_host = true;
  ll::LlBuffers a_buffers, b_buffers;
  ASSERT_TRUE(a_buffers.allocate(shape, K, EPC_DTYPE_INT64, outputs));
  ASSERT_TRUE(b_buffers.allocate(shape, K));
  HandlePtr a, b;
  for (int round = 0; round < 2; ++round) {
    const bool pending_dispatch = round == 0;
    const std::string label = pending_dispatch ? "dispatch pending on A" : "combine pending on A";
    const ll::LlStep a_step =
        ll::make_step(ll::random_problem(shape, K, 99200 + round, true, 0.1), 99210 + round, my_rank());
    const ll::LlStep b_step =
        ll::make_step(ll::random_problem(shape, K, 99220 + round, true, 0.1), 99230 + round, my_rank());
    ASSERT_TRUE(a_buffers.upload(a_step, s));
    ASSERT_TRUE(b_buffers.upload(b_step, s));
    if (round == 0) {
      ASSERT_TRUE(ll::create_handle(group.get(), a_buffers, s, a));
      ASSERT_TRUE(ll::create_handle(group.get(), b_buffers, s, b));
    } else {
      ASSERT_TRUE(ll::update_handle(a.get(), a_buffers, s));
      ASSERT_TRUE(ll::update_handle(b.get(), b_buffers, s));
    }
    expect_usage(epc_complete(a.get(), 0, s), "nothing pending", label + ": complete on A before the step");
    expect_status(epc_complete(a.get(), 1, s), EPC_ERR_INVALID_ARGUMENT, "flags", label + ": complete with flags 1");
    if (pending_dispatch) {
      ASSERT_TRUE(epc_ok(ll::call_dispatch(a.get(), a_buffers, EPC_STEP_SEND_ONLY, s), "send-only dispatch on A"));
    } else {
      ASSERT_TRUE(ll::dispatch(a.get(), a_buffers, 0, s));
      ASSERT_TRUE(epc_ok(ll::call_combine(a.get(), a_buffers, EPC_STEP_SEND_ONLY, s), "send-only combine on A"));
    }
    const uint32_t pending = pending_dispatch ? EPC_PENDING_DISPATCH : EPC_PENDING_COMBINE;
    EXPECT_EQ(pending_of(a.get()), pending) << label;

    // A second step on A, in either half and either form, and an update of A.
    expect_usage(ll::call_dispatch(a.get(), a_buffers, 0, s), "pending", label + ": dispatch on A");
    expect_usage(ll::call_dispatch(a.get(), a_buffers, EPC_STEP_SEND_ONLY, s), "pending",
                 label + ": send-only dispatch on A");
    expect_usage(ll::call_combine(a.get(), a_buffers, 0, s), "pending", label + ": combine on A");
    expect_usage(ll::call_combine(a.get(), a_buffers, EPC_STEP_SEND_ONLY, s), "pending",
                 label + ": send-only combine on A");
    expect_usage(update_routing(a.get(), a_buffers.topk_idx(), s), "pending", label + ": update of A");
    // Another handle of the group steps while A's half is pending, and has nothing of its own
    // to complete.
    ASSERT_TRUE(ll::dispatch_and_combine(b.get(), b_buffers, s));
    expect_usage(epc_complete(b.get(), 0, s), "nothing pending", label + ": complete on B");
    EXPECT_EQ(pending_of(a.get()), pending) << label << ", after the refused calls";
    EXPECT_EQ(pending_of(b.get()), static_cast<uint32_t>(EPC_PENDING_NONE)) << label;

    // The refused calls changed nothing: A completes, B steps, both exact.
    ASSERT_TRUE(epc_ok(epc_complete(a.get(), 0, s), "epc_complete on A"));
    EXPECT_EQ(pending_of(a.get()), static_cast<uint32_t>(EPC_PENDING_NONE)) << label;
    expect_usage(epc_complete(a.get(), 0, s), "nothing pending", label + ": a second complete on A");
    if (pending_dispatch) {
      ASSERT_TRUE(ll::combine(a.get(), a_buffers, 0, s));
    }
    ASSERT_TRUE(ll::dispatch_and_combine(b.get(), b_buffers, s));
    a_buffers.check(a_step, s, label + ": A after the refused calls");
    b_buffers.check(b_step, s, label + ": B after the refused calls");
  }
  // Destroying a handle with a step pending gives its slot back to the group.
  const ll::LlStep last = ll::make_step(ll::random_problem(shape, K, 99240, true, 0.1), 99241, my_rank());
  ASSERT_TRUE(a_buffers.upload(last, s));
  ASSERT_TRUE(b_buffers.upload(last, s));
  ASSERT_TRUE(ll::update_handle(a.get(), a_buffers, s));
  ASSERT_TRUE(ll::update_handle(b.get(), b_buffers, s));
  ASSERT_TRUE(epc_ok(ll::call_dispatch(a.get(), a_buffers, EPC_STEP_SEND_ONLY, s), "send-only dispatch on A"));
  expect_usage(ll::call_dispatch(a.get(), a_buffers, 0, s), "pending", "dispatch on A, still pending");
  ASSERT_TRUE(epc_ok(epc_complete(a.get(), 0, s), "epc_complete on A"));
  ASSERT_TRUE(ll::combine(a.get(), a_buffers, 0, s));
  a_buffers.check(last, s, "A, last step");
  ASSERT_TRUE(epc_ok(ll::call_dispatch(a.get(), a_buffers, EPC_STEP_SEND_ONLY, s), "send-only dispatch on A"));
  a.reset();  // collective in effect: every rank destroys A with its dispatch pending
  ASSERT_TRUE(ll::dispatch_and_combine(b.get(), b_buffers, s));
  b_buffers.check(last, s, "B after A was destroyed with a step pending");
}

// ---- High-throughput send-only (2.1) ---------------------------------------------------------

// How a library message names a handle: by the id epc_handle_query reports (ABI 2.1) and the
// caller's EpcHandle* ("handle 3 (0x...)").
uint64_t id_of(const EpcHandle* handle) {
  EpcHandleInfo info = EPC_HANDLE_INFO_INIT;
  EXPECT_EQ(epc_handle_query(handle, &info), EPC_OK);
  return info.id;
}
std::string handle_id(const EpcHandle* handle) {
  char text[64];
  std::snprintf(text, sizeof text, "handle %llu (%p)", static_cast<unsigned long long>(id_of(handle)),
                static_cast<const void*>(handle));
  return text;
}

// One HT group, handles A, B and C on one step's buffers each. epc_complete with nothing
// pending is refused. Around a send-only dispatch on A: another step or an update on A, and
// a dispatch (fused or send-only) on B, are refused, the latter naming A. Combine has its own
// slots, flags and step counter: where the group's max_pending_steps (EpcGroupInfo) allows
// two, a send-only combine on B may be pending beside A's dispatch, a combine on C is then
// refused naming B, and B completes before A; with one, the send-only combine on B is
// refused naming A and max_pending_steps, and a fused combine on B runs beside A's pending
// dispatch. Then every handle's remaining calls run and all three give the reference
// model's outputs.
TEST(CallOrder, HighThroughputSendOnlyOrder) {
  constexpr int K = 4;
  const ht::HtShape shape = world_shape(8, 1024, 64, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  ht::HtBuffers buffers[3];
  ht::HtStep steps[3];
  HandlePtr handles[3];
  for (int i = 0; i < 3; ++i) {
    steps[i] = ht::make_step(ht::make_problem(shape, ht::random_spec(K, 99300 + 10 * i)), 99301 + 10 * i, my_rank());
    ASSERT_TRUE(buffers[i].allocate(shape, K));
    ASSERT_TRUE(buffers[i].upload(steps[i], ht::CallOptions{}, s));
    ASSERT_TRUE(ht::create_handle(group.get(), buffers[i], EPC_SIZING_CAPACITY, s, handles[i]));
  }
  EpcHandle* a = handles[0].get();
  EpcHandle* b = handles[1].get();
  EpcHandle* c = handles[2].get();
  // Ids count the group's handles in creation order, from 1.
  EXPECT_EQ(id_of(a), 1u);
  EXPECT_EQ(id_of(b), 2u);
  EXPECT_EQ(id_of(c), 3u);
  expect_usage(epc_complete(a, 0, s), "nothing pending", "epc_complete on an HT handle with nothing pending");
  expect_usage(epc_complete(a, 0, s), handle_id(a), "epc_complete with nothing pending names the handle");

  ASSERT_TRUE(epc_ok(ht::call_dispatch(a, buffers[0], s, EPC_STEP_SEND_ONLY), "send-only dispatch on A"));
  EXPECT_EQ(pending_of(a), static_cast<uint32_t>(EPC_PENDING_DISPATCH));
  expect_usage(ht::call_dispatch(a, buffers[0], s), "pending", "dispatch on A with its dispatch pending");
  expect_usage(ht::call_combine(a, buffers[0], s, EPC_STEP_SEND_ONLY), "pending",
               "send-only combine on A with its dispatch pending");
  expect_usage(update_routing(a, buffers[0].topk_idx(), s), "pending", "update of A with its dispatch pending");
  expect_usage(ht::call_dispatch(b, buffers[1], s), handle_id(a), "fused dispatch on B while A's is pending");
  expect_usage(ht::call_dispatch(b, buffers[1], s, EPC_STEP_SEND_ONLY), handle_id(a),
               "send-only dispatch on B while A's is pending");
  EXPECT_EQ(pending_of(b), static_cast<uint32_t>(EPC_PENDING_NONE));

  EpcGroupInfo group_info = EPC_GROUP_INFO_INIT;
  ASSERT_TRUE(epc_ok(epc_group_query(group.get(), &group_info), "epc_group_query"));
  if (group_info.max_pending_steps >= 2) {
    ASSERT_TRUE(
        epc_ok(ht::call_combine(b, buffers[1], s, EPC_STEP_SEND_ONLY), "send-only combine on B beside A's dispatch"));
    EXPECT_EQ(pending_of(b), static_cast<uint32_t>(EPC_PENDING_COMBINE));
    expect_usage(ht::call_combine(c, buffers[2], s), handle_id(b), "fused combine on C while B's is pending");
    expect_usage(ht::call_dispatch(c, buffers[2], s), handle_id(a), "fused dispatch on C while A's is pending");
    ASSERT_TRUE(epc_ok(epc_complete(b, 0, s), "epc_complete on B"));
  } else {
    expect_usage(ht::call_combine(b, buffers[1], s, EPC_STEP_SEND_ONLY), handle_id(a),
                 "send-only combine on B beside A's dispatch, max_pending_steps 1");
    expect_usage(ht::call_combine(b, buffers[1], s, EPC_STEP_SEND_ONLY), "max_pending_steps = 1",
                 "send-only combine on B beside A's dispatch, max_pending_steps 1");
    EXPECT_EQ(pending_of(b), static_cast<uint32_t>(EPC_PENDING_NONE));
    expect_usage(ht::call_dispatch(c, buffers[2], s), handle_id(a), "fused dispatch on C while A's is pending");
    ASSERT_TRUE(ht::combine(b, buffers[1], s));  // fused: nothing more pending
  }
  ASSERT_TRUE(epc_ok(epc_complete(a, 0, s), "epc_complete on A"));
  EXPECT_EQ(pending_of(a), static_cast<uint32_t>(EPC_PENDING_NONE));
  EXPECT_EQ(pending_of(b), static_cast<uint32_t>(EPC_PENDING_NONE));
  expect_usage(epc_complete(a, 0, s), "nothing pending", "a second epc_complete on A");
  ASSERT_TRUE(ht::combine(a, buffers[0], s));
  ASSERT_TRUE(ht::dispatch(b, buffers[1], s));
  ASSERT_TRUE(ht::dispatch_and_combine(c, buffers[2], s));
  for (int i = 0; i < 3; ++i) buffers[i].check(steps[i], s, std::string("handle ") + "ABC"[i]);
}

// An HT handle destroyed with a send-only dispatch pending, then one with a send-only
// combine pending (every rank destroys it): the destroy ends the sent step, so the group's
// next steps on another handle neither wait for it nor reuse its step, and are exact.
TEST(CallOrder, HighThroughputHandleDestroyedWithAStepPending) {
  constexpr int K = 4;
  const ht::HtShape shape = world_shape(8, 1024, 64, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  ht::HtBuffers abandoned_buffers, buffers;
  ASSERT_TRUE(abandoned_buffers.allocate(shape, K));
  ASSERT_TRUE(buffers.allocate(shape, K));
  const ht::HtStep abandoned = ht::make_step(ht::make_problem(shape, ht::random_spec(K, 99400)), 99401, my_rank());
  ASSERT_TRUE(abandoned_buffers.upload(abandoned, ht::CallOptions{}, s));
  HandlePtr keeper;
  for (int round = 0; round < 2; ++round) {
    const bool dispatch = round == 0;
    HandlePtr doomed;
    ASSERT_TRUE(ht::create_handle(group.get(), abandoned_buffers, EPC_SIZING_CAPACITY, s, doomed));
    const EpcStatus sent = dispatch ? ht::call_dispatch(doomed.get(), abandoned_buffers, s, EPC_STEP_SEND_ONLY)
                                    : ht::call_combine(doomed.get(), abandoned_buffers, s, EPC_STEP_SEND_ONLY);
    ASSERT_TRUE(epc_ok(sent, dispatch ? "send-only dispatch" : "send-only combine"));
    doomed.reset();  // destroyed with the step pending
    const ht::HtStep step =
        ht::make_step(ht::make_problem(shape, ht::random_spec(K, 99410 + 10 * round)), 99411 + 10 * round, my_rank());
    ASSERT_TRUE(buffers.upload(step, ht::CallOptions{}, s));
    if (keeper == nullptr) {
      ASSERT_TRUE(ht::create_handle(group.get(), buffers, EPC_SIZING_CAPACITY, s, keeper));
    } else {
      ASSERT_TRUE(ht::update_handle(keeper.get(), buffers, s));
    }
    ASSERT_TRUE(ht::dispatch_and_combine(keeper.get(), buffers, s));
    buffers.check(step, s,
                  std::string("after a handle was destroyed with its send-only ") +
                      (dispatch ? "dispatch" : "combine") + " pending");
  }
  EXPECT_EQ(async_error(group.get()).status, EPC_OK) << async_error(group.get()).message;
}

// ---- Handle ids (2.1) -------------------------------------------------------------------------

// A failed epc_handle_create takes no id (a failing call changes nothing): in both modes, after
// two creations that the handle itself refuses (routing with K above max_topk), the next
// handle created gets the id after the last handle that exists.
TEST(CallOrder, FailedHandleCreateTakesNoId) {
  constexpr int K = 4;
  const Shape shape = world_shape(8, 1024, 32, K);
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  for (EpcMode mode : {EPC_MODE_LOW_LATENCY, EPC_MODE_HIGH_THROUGHPUT}) {
    const std::string label = mode == EPC_MODE_LOW_LATENCY ? "LL" : "HT";
    GroupPtr group;
    ASSERT_TRUE(create_group(shape, mode, group));
    HandlePtr first;
    ASSERT_TRUE(create_handle_with(group.get(), handle_config(), nullptr, s, first, label + " first handle"));
    EXPECT_EQ(id_of(first.get()), 1u) << label;
    // Refused inside the handle's constructor, after the id used to be taken: no data is
    // read, the shape alone fails.
    const EpcTensor too_wide = make_tensor(nullptr, EPC_DTYPE_INT32, {1, K + 1});
    EpcRouting routing = EPC_ROUTING_INIT;
    routing.topk_idx = &too_wide;
    const EpcHandleConfig config = handle_config();
    for (int attempt = 0; attempt < 2; ++attempt) {
      EpcHandle* refused = nullptr;
      expect_status(epc_handle_create(group.get(), &config, &routing, s, &refused), EPC_ERR_INVALID_ARGUMENT,
                    "max_topk", label + " create with K above max_topk");
      EXPECT_EQ(refused, nullptr) << label << ": a failing call writes no out-parameter";
    }
    HandlePtr second;
    ASSERT_TRUE(create_handle_with(group.get(), handle_config(), nullptr, s, second, label + " second handle"));
    EXPECT_EQ(id_of(second.get()), 2u) << label << ": the refused creations must not take ids";
  }
}

}  // namespace
}  // namespace epc::gputest
