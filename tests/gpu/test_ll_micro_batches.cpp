// SPDX-License-Identifier: Apache-2.0
// Several low-latency send-only steps in flight on one group (issue 24): two micro-batches'
// handles, A and B, interleave their dispatch and combine halves as a dual-batch-overlap decode
// loop does, on one stream or on one stream per micro-batch joined by events. Every output is
// compared bit for bit with the CPU reference model, as in test_ll.cpp. Then the usage errors
// the host can see, and the fault case: a handle whose complete never comes holds its slot and
// nothing else; destroying it frees the slot for the others.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/micro_batch_schedule.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest::ll {
namespace {

constexpr int kTopk = 4;
const LlShape& shape() {
  static const LlShape s = world_shape(8, 2048, 32, kTopk);
  return s;
}

::testing::AssertionResult create_group_with(int max_pending_steps, GroupPtr& out) {
  EpcGroupConfig c = group_config(shape(), EPC_MODE_LOW_LATENCY);
  c.max_pending_steps = static_cast<uint32_t>(max_pending_steps);
  EpcGroup* group = nullptr;
  ::testing::AssertionResult r =
      epc_ok(epc_group_create(context().comm, &c, &group),
             "epc_group_create(LL, max_pending_steps " + std::to_string(max_pending_steps) + ")");
  if (r) out.reset(group);
  return r;
}

// The step of micro-batch `batch` in layer `layer` of a test seeded `seed`: random B and
// routing, ~10% masked.
LlStep layer_step(uint64_t seed, int layer, int batch) {
  const uint64_t s = seed + 100 * static_cast<uint64_t>(layer) + 10 * static_cast<uint64_t>(batch);
  return make_step(random_problem(shape(), kTopk, s, /*random_token_counts=*/true, 0.1), s + 1, my_rank());
}

std::string text_of(const void* handle) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", handle);
  return text;
}

void expect_usage(EpcStatus status, const std::vector<std::string>& parts, const std::string& what) {
  const std::string message = last_error();
  EXPECT_EQ(status, EPC_ERR_INVALID_USAGE) << what << ": got " << epc_status_string(status) << ": " << message;
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << what << ": the message should name \"" << part << "\": " << message;
  }
}

bool group_healthy(EpcGroup* group) {
  const EpcStatus status = epc_group_async_error(group);
  EXPECT_EQ(status, EPC_OK) << last_error();
  return status == EPC_OK;
}

// ---- Every interleaving of one layer -----------------------------------------------------

// The 70 interleavings of A's and B's layer (dispatch send, complete, combine send, complete),
// out-of-order completes among them, one after another on one group with fresh routing and
// data each: on one stream, then on two streams (A's and B's) joined by events.
void run_every_interleaving(bool two_streams, uint64_t seed) {
  GroupPtr group;
  ASSERT_TRUE(create_group_with(2, group));
  Stream first, second;
  ASSERT_TRUE(first.status());
  ASSERT_TRUE(second.status());
  MicroBatchRunner runner({first.get(), two_streams ? second.get() : first.get()});
  LlBuffers buffers[2];
  HandlePtr handles[2];
  for (LlBuffers& b : buffers) ASSERT_TRUE(b.allocate(shape(), kTopk));
  const std::vector<std::vector<MbCall>> schedules = two_batch_interleavings();
  ASSERT_EQ(schedules.size(), 70u);
  int failing = 0;
  for (size_t layer = 0; layer < schedules.size(); ++layer) {
    const LlStep steps[2] = {layer_step(seed, static_cast<int>(layer), 0),
                             layer_step(seed, static_cast<int>(layer), 1)};
    for (int b = 0; b < 2; ++b) {
      ASSERT_TRUE(buffers[b].upload(steps[b], runner.stream(b)));
      if (!handles[b]) {
        ASSERT_TRUE(create_handle(group.get(), buffers[b], runner.stream(b), handles[b]));
      } else {
        ASSERT_TRUE(update_handle(handles[b].get(), buffers[b], runner.stream(b)));
      }
    }
    for (const MbCall& c : schedules[layer]) {
      ASSERT_TRUE(runner.call(handles[c.batch].get(), buffers[c.batch], c)) << describe(schedules[layer]);
    }
    for (int b = 0; b < 2; ++b) {
      const std::string where = std::string(b == 0 ? "A" : "B") + ", layer " + std::to_string(layer) + " (" +
                                describe(schedules[layer]) + (two_streams ? ", two streams)" : ", one stream)");
      if (!buffers[b].check(steps[b], runner.stream(b), where, failing < kMaxReportedSteps)) ++failing;
    }
  }
  EXPECT_EQ(failing, 0) << failing << " of 140 micro-batch results differ from the reference";
  EXPECT_TRUE(group_healthy(group.get()));
}

TEST(LowLatencyMicroBatches, EveryInterleavingOnOneStream) { run_every_interleaving(false, 240000); }

TEST(LowLatencyMicroBatches, EveryInterleavingOnTwoStreams) { run_every_interleaving(true, 250000); }

// ---- A dual-batch-overlap decode loop -------------------------------------------------------

// As vLLM's dual-batch overlap runs a decode step: every micro-batch's dispatch is sent; then
// each in turn completes its dispatch, runs its experts (the uploaded expert outputs stand in)
// and sends its combine; then each in turn completes its combine and, its next layer's
// attention done, sends that layer's dispatch while the others' combines are still pending.
// `batches` micro-batches on a group allowing that many pending steps, on one stream or one per
// micro-batch; every layer of every micro-batch is checked.
void run_dbo_loop(int batches, bool one_stream_per_batch, int layers, uint64_t seed) {
  GroupPtr group;
  ASSERT_TRUE(create_group_with(batches, group));
  std::vector<std::unique_ptr<Stream>> streams;
  for (int b = 0; b < (one_stream_per_batch ? batches : 1); ++b) {
    streams.push_back(std::make_unique<Stream>());
    ASSERT_TRUE(streams.back()->status());
  }
  std::vector<cudaStream_t> of_batch;
  for (int b = 0; b < batches; ++b) of_batch.push_back(streams[one_stream_per_batch ? b : 0]->get());
  MicroBatchRunner runner(of_batch);
  std::vector<LlBuffers> buffers(static_cast<size_t>(batches));
  std::vector<HandlePtr> handles(static_cast<size_t>(batches));
  std::vector<LlStep> steps(static_cast<size_t>(batches));
  for (LlBuffers& b : buffers) ASSERT_TRUE(b.allocate(shape(), kTopk));
  // Layer 0's attention: upload and dispatch every micro-batch.
  for (int b = 0; b < batches; ++b) {
    steps[b] = layer_step(seed, 0, b);
    ASSERT_TRUE(buffers[b].upload(steps[b], runner.stream(b)));
    ASSERT_TRUE(create_handle(group.get(), buffers[b], runner.stream(b), handles[b]));
    ASSERT_TRUE(runner.call(handles[b].get(), buffers[b], {b, MbOp::kDispatchSend}));
  }
  int failing = 0;
  for (int layer = 0; layer < layers; ++layer) {
    for (int b = 0; b < batches; ++b) {  // the experts of each micro-batch
      ASSERT_TRUE(runner.call(handles[b].get(), buffers[b], {b, MbOp::kComplete}));
      ASSERT_TRUE(runner.call(handles[b].get(), buffers[b], {b, MbOp::kCombineSend}));
    }
    for (int b = 0; b < batches; ++b) {  // each micro-batch's combine, then its next attention
      ASSERT_TRUE(runner.call(handles[b].get(), buffers[b], {b, MbOp::kComplete}));
      const std::string where = "micro-batch " + std::to_string(b) + " of " + std::to_string(batches) + ", layer " +
                                std::to_string(layer) + (one_stream_per_batch ? " (a stream each)" : " (one stream)");
      if (!buffers[b].check(steps[b], runner.stream(b), where, failing < kMaxReportedSteps)) ++failing;
      if (layer + 1 == layers) continue;
      steps[b] = layer_step(seed, layer + 1, b);
      ASSERT_TRUE(buffers[b].upload(steps[b], runner.stream(b)));
      ASSERT_TRUE(update_handle(handles[b].get(), buffers[b], runner.stream(b)));
      ASSERT_TRUE(runner.call(handles[b].get(), buffers[b], {b, MbOp::kDispatchSend}));
    }
  }
  EXPECT_EQ(failing, 0) << failing << " of " << batches * layers << " micro-batch layers differ from the reference";
  EXPECT_TRUE(group_healthy(group.get()));
}

TEST(LowLatencyMicroBatches, DualBatchOverlapDecodeLoopOnOneStream) { run_dbo_loop(2, false, 16, 260000); }

TEST(LowLatencyMicroBatches, DualBatchOverlapDecodeLoopOnTwoStreams) { run_dbo_loop(2, true, 16, 270000); }

// max_pending_steps 3: a third slot per direction, three micro-batches in flight.
TEST(LowLatencyMicroBatches, ThreeMicroBatchesOnThreeSlots) { run_dbo_loop(3, true, 8, 280000); }

// ---- What the host can check ----------------------------------------------------------------

// With A's and B's dispatches pending (max_pending_steps 2): a send-only step on C, naming A
// and B; a whole dispatch on C (every dispatch slot held), naming A and B; a second step on
// A; a complete on C. A max_pending_steps 1 group refuses B's send while A's is pending, naming
// A. The refused calls change nothing: every step after them is exact.
TEST(LowLatencyMicroBatches, UsageErrorsNameTheHandles) {
  GroupPtr group;
  ASSERT_TRUE(create_group_with(2, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const cudaStream_t s = stream.get();
  LlBuffers buffers[3];
  HandlePtr h[3];
  LlStep steps[3];
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(buffers[i].allocate(shape(), kTopk));
    steps[i] = layer_step(290000, 0, i);
    ASSERT_TRUE(buffers[i].upload(steps[i], s));
    ASSERT_TRUE(create_handle(group.get(), buffers[i], s, h[i]));
  }
  const std::string a = text_of(h[0].get()), b = text_of(h[1].get()), c = text_of(h[2].get());
  ASSERT_TRUE(epc_ok(call_dispatch(h[0].get(), buffers[0], EPC_STEP_SEND_ONLY, s), "A.dispatch"));
  ASSERT_TRUE(epc_ok(call_dispatch(h[1].get(), buffers[1], EPC_STEP_SEND_ONLY, s), "B.dispatch"));
  expect_usage(call_dispatch(h[2].get(), buffers[2], EPC_STEP_SEND_ONLY, s), {"max_pending_steps", a, b, c},
               "a third send-only dispatch");
  expect_usage(call_dispatch(h[2].get(), buffers[2], 0, s), {"dispatch slot", a, b, c},
               "a whole dispatch while every dispatch slot is held");
  expect_usage(call_dispatch(h[0].get(), buffers[0], EPC_STEP_SEND_ONLY, s), {"pending", a},
               "a second pending step on A");
  expect_usage(call_combine(h[0].get(), buffers[0], EPC_STEP_SEND_ONLY, s), {"pending", a},
               "a combine on A while its dispatch is pending");
  expect_usage(epc_complete(h[2].get(), 0, s), {"nothing pending", c}, "complete on C");
  // B completes first; C's whole dispatch then finds B's slot free.
  ASSERT_TRUE(epc_ok(epc_complete(h[1].get(), 0, s), "B.complete"));
  expect_usage(epc_complete(h[1].get(), 0, s), {"nothing pending", b}, "a second complete on B");
  ASSERT_TRUE(dispatch(h[2].get(), buffers[2], 0, s));
  ASSERT_TRUE(epc_ok(epc_complete(h[0].get(), 0, s), "A.complete"));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(combine(h[i].get(), buffers[i], EPC_STEP_SEND_ONLY, s));
    buffers[i].check(steps[i], s, std::string("handle ") + static_cast<char>('A' + i) + " after the refused calls");
  }

  GroupPtr single;
  ASSERT_TRUE(create_group_with(1, single));
  HandlePtr sa, sb;
  ASSERT_TRUE(create_handle(single.get(), buffers[0], s, sa));
  ASSERT_TRUE(create_handle(single.get(), buffers[1], s, sb));
  ASSERT_TRUE(buffers[0].upload(steps[0], s));
  ASSERT_TRUE(buffers[1].upload(steps[1], s));
  ASSERT_TRUE(epc_ok(call_dispatch(sa.get(), buffers[0], EPC_STEP_SEND_ONLY, s), "A.dispatch (limit 1)"));
  expect_usage(call_dispatch(sb.get(), buffers[1], EPC_STEP_SEND_ONLY, s),
               {"max_pending_steps = 1", text_of(sa.get()), text_of(sb.get())}, "B.dispatch past the limit of 1");
  // A whole step still finds the second slot.
  ASSERT_TRUE(dispatch_and_combine(sb.get(), buffers[1], s));
  ASSERT_TRUE(epc_ok(epc_complete(sa.get(), 0, s), "A.complete (limit 1)"));
  ASSERT_TRUE(combine(sa.get(), buffers[0], 0, s));
  buffers[0].check(steps[0], s, "A on the limit-1 group");
  buffers[1].check(steps[1], s, "B on the limit-1 group");
  EXPECT_TRUE(group_healthy(group.get()));
  EXPECT_TRUE(group_healthy(single.get()));
}

// ---- A handle that never completes ----------------------------------------------------------

// A sends a dispatch and never completes it. B then runs layers of every kind (send-only
// halves, whole steps), exact, in far less than the group's timeout: A holds one dispatch
// slot and nothing else. A is destroyed with its step pending; B's later layers (whose
// dispatches now reuse A's slot, so they wait for the credits A's destroy gave) and a new
// handle's are exact, and the group stays healthy. The same with A's combine pending.
TEST(LowLatencyMicroBatches, AHandleNeverCompletedBlocksNoOther) {
  for (int round = 0; round < 2; ++round) {
    const bool combine_pending = round == 1;
    const std::string label = combine_pending ? "A's combine pending" : "A's dispatch pending";
    GroupPtr group;
    ASSERT_TRUE(create_group_with(2, group));
    Stream stream;
    ASSERT_TRUE(stream.status());
    const cudaStream_t s = stream.get();
    LlBuffers a_buffers, b_buffers;
    ASSERT_TRUE(a_buffers.allocate(shape(), kTopk));
    ASSERT_TRUE(b_buffers.allocate(shape(), kTopk));
    const LlStep a_step = layer_step(300000 + 1000 * round, 0, 0);
    ASSERT_TRUE(a_buffers.upload(a_step, s));
    HandlePtr a, b;
    ASSERT_TRUE(create_handle(group.get(), a_buffers, s, a));
    if (combine_pending) {
      ASSERT_TRUE(dispatch(a.get(), a_buffers, 0, s));
      ASSERT_TRUE(epc_ok(call_combine(a.get(), a_buffers, EPC_STEP_SEND_ONLY, s), label));
    } else {
      ASSERT_TRUE(epc_ok(call_dispatch(a.get(), a_buffers, EPC_STEP_SEND_ONLY, s), label));
    }
    int failing = 0;
    for (int layer = 0; layer < 12; ++layer) {
      if (layer == 6) {
        a.reset();  // destroyed with its step pending: its slot goes back
        EXPECT_TRUE(group_healthy(group.get())) << label << ": after destroying A";
      }
      const LlStep step = layer_step(310000 + 1000 * round, layer, 1);
      ASSERT_TRUE(b_buffers.upload(step, s));
      if (!b) {
        ASSERT_TRUE(create_handle(group.get(), b_buffers, s, b));
      } else {
        ASSERT_TRUE(update_handle(b.get(), b_buffers, s));
      }
      const StepFlags flags = layer % 2 == 0 ? EPC_STEP_SEND_ONLY : 0;
      ASSERT_TRUE(dispatch_and_combine(b.get(), b_buffers, s, flags, flags));
      const std::string where = label + ": B, layer " + std::to_string(layer) + (layer >= 6 ? ", A destroyed" : "");
      if (!b_buffers.check(step, s, where, failing < kMaxReportedSteps)) ++failing;
    }
    EXPECT_EQ(failing, 0) << label;
    // A new handle takes A's place.
    LlBuffers c_buffers;
    ASSERT_TRUE(c_buffers.allocate(shape(), kTopk));
    const LlStep c_step = layer_step(320000 + 1000 * round, 0, 2);
    ASSERT_TRUE(c_buffers.upload(c_step, s));
    HandlePtr c;
    ASSERT_TRUE(create_handle(group.get(), c_buffers, s, c));
    ASSERT_TRUE(dispatch_and_combine(c.get(), c_buffers, s, EPC_STEP_SEND_ONLY, EPC_STEP_SEND_ONLY));
    c_buffers.check(c_step, s, label + ": a new handle after A");
    EXPECT_TRUE(group_healthy(group.get())) << label;
  }
}

}  // namespace
}  // namespace epc::gputest::ll
