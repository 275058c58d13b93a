// SPDX-License-Identifier: Apache-2.0
// Concurrency on one communicator, compared bit for bit with the reference model:
//   1. two low-latency groups stepping on two streams, queued alternately with no host
//      synchronisation until every step is queued;
//   2. three high-throughput handles of one group (EXACT, CAPACITY, EXACT) used in turn in
//      changing orders, the CAPACITY one updated with new routing in between;
//   3. two host threads per rank process, each driving its own group (an LL and an HT group,
//      created beforehand on the main thread: creation is collective and blocking) on its own
//      stream at the same time, queuing their steps in turn, in the same order on every rank.
// In 1 and 3 kernels of two groups run on the GPU at the same time, and each spins on its
// peers, so the groups' SM budgets are set to fit on the GPU together (the header's
// conventions say why).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest {
namespace {

constexpr uint32_t kLlSms = 32;  // two such groups, or one with an HT group of 24, fit on any
constexpr uint32_t kHtSms = 24;  // GPU of 64 SMs or more

::testing::AssertionResult create_group_with_sms(const Shape& shape, EpcMode mode, uint32_t num_sms, GroupPtr& out) {
  EpcGroupConfig config = group_config(shape, mode);
  config.num_sms = num_sms;
  EpcGroup* group = nullptr;
  ::testing::AssertionResult r = epc_ok(epc_group_create(context().comm, &config, &group),
                                        "epc_group_create (num_sms " + std::to_string(num_sms) + ")");
  if (r) out.reset(group);
  return r;
}

// ---- 1. Two groups, two streams ---------------------------------------------------------------

TEST(Concurrency, TwoGroupsStepOnTwoStreamsWithoutHostSync) {
  constexpr int kSteps = 8;
  constexpr int K = 4;
  const Shape shape = world_shape(8, 1024, 32, K);
  GroupPtr groups[2];
  Stream streams[2];
  std::vector<ll::LlStep> steps[2];
  std::vector<ll::LlBuffers> buffers[2];
  for (int g = 0; g < 2; ++g) {
    ASSERT_TRUE(create_group_with_sms(shape, EPC_MODE_LOW_LATENCY, kLlSms, groups[g]));
    ASSERT_TRUE(streams[g].status());
    buffers[g].resize(kSteps);
    for (int s = 0; s < kSteps; ++s) {
      const uint64_t seed = 81000 + 100 * static_cast<uint64_t>(g) + 2 * static_cast<uint64_t>(s);
      steps[g].push_back(ll::make_step(ll::random_problem(shape, K, seed, true, 0.1), seed + 1, my_rank()));
      ASSERT_TRUE(buffers[g][s].allocate(shape, K));
      ASSERT_TRUE(buffers[g][s].upload(steps[g][s], streams[g].get()));
    }
    ASSERT_TRUE(cuda_ok(cudaStreamSynchronize(streams[g].get()), "uploads"));
  }
  HandlePtr handles[2];
  for (int g = 0; g < 2; ++g) {
    ASSERT_TRUE(ll::create_handle(groups[g].get(), buffers[g][0], streams[g].get(), handles[g]));
  }
  // Every step of both groups is queued before the host waits for anything.
  for (int s = 0; s < kSteps; ++s) {
    for (int g = 0; g < 2; ++g) {
      if (s > 0) {
        ASSERT_TRUE(ll::update_handle(handles[g].get(), buffers[g][s], streams[g].get()));
      }
      ASSERT_TRUE(ll::dispatch_and_combine(handles[g].get(), buffers[g][s], streams[g].get()));
    }
  }
  int failing_steps = 0;
  for (int g = 0; g < 2; ++g) {
    for (int s = 0; s < kSteps; ++s) {
      const std::string where = "group " + std::to_string(g) + " step " + std::to_string(s) +
                                " (B=" + std::to_string(steps[g][s].tokens()) + ")";
      if (!buffers[g][s].check(steps[g][s], streams[g].get(), where, failing_steps < kMaxReportedSteps)) {
        ++failing_steps;
      }
    }
  }
  EXPECT_EQ(failing_steps, 0) << failing_steps << " of " << 2 * kSteps << " steps differ from the reference";
}

// ---- 2. Three handles of one HT group ---------------------------------------------------------

TEST(Concurrency, ThreeHighThroughputHandlesOfOneGroupUsedInTurn) {
  constexpr int K = 8;
  constexpr int kRounds = 4;
  const int orders[kRounds][3] = {{0, 1, 2}, {2, 0, 1}, {1, 2, 0}, {0, 2, 1}};
  const EpcSizing sizing[3] = {EPC_SIZING_EXACT, EPC_SIZING_CAPACITY, EPC_SIZING_EXACT};
  const Shape shape = world_shape(8, 1024, 128, K);
  GroupPtr group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, group));
  Stream stream;
  ASSERT_TRUE(stream.status());
  const ht::CallOptions options;
  std::vector<ref::Problem> problems;
  ht::HtBuffers buffers[3];
  HandlePtr handles[3];
  for (int h = 0; h < 3; ++h) {
    problems.push_back(ht::make_problem(shape, ht::random_spec(K, 82000 + 100 * h)));
    ASSERT_TRUE(buffers[h].allocate(shape, K));
    const ht::HtStep first = ht::make_step(problems[h], 82001 + 100 * h, my_rank());
    ASSERT_TRUE(buffers[h].upload(first, options, stream.get()));
    ASSERT_TRUE(ht::create_handle(group.get(), buffers[h], sizing[h], stream.get(), handles[h]));
  }
  int failing_steps = 0;
  for (int round = 0; round < kRounds; ++round) {
    // New payloads for every handle; new routing too for the CAPACITY handle in rounds 1, 3.
    std::vector<ht::HtStep> steps(3);
    const bool new_routing = round % 2 == 1;
    for (int h = 0; h < 3; ++h) {
      const uint64_t seed = 83000 + 100 * static_cast<uint64_t>(round) + 10 * h;
      if (h == 1 && new_routing) {
        problems[h] = ht::make_problem(shape, ht::random_spec(K, seed));
      } else {
        ht::replace_payload(problems[h], seed);
      }
      steps[h] = ht::make_step(problems[h], seed + 1, my_rank());
    }
    for (int i = 0; i < 3; ++i) {
      const int h = orders[round][i];
      ASSERT_TRUE(buffers[h].upload(steps[h], options, stream.get()));
      if (h == 1 && new_routing) {
        ASSERT_TRUE(ht::update_handle(handles[h].get(), buffers[h], stream.get()));
      }
      ASSERT_TRUE(ht::dispatch_and_combine(handles[h].get(), buffers[h], stream.get()));
    }
    for (int h = 0; h < 3; ++h) {
      const std::string where = "handle " + std::to_string(h) + " (" + sizing_name(sizing[h]) + "), round " +
                                std::to_string(round) + " (B=" + std::to_string(steps[h].tokens()) +
                                ", N=" + std::to_string(steps[h].num_recv()) + ")";
      if (!buffers[h].check(steps[h], stream.get(), where, failing_steps < kMaxReportedSteps)) {
        ++failing_steps;
      }
    }
  }
  EXPECT_EQ(failing_steps, 0) << failing_steps << " of " << 3 * kRounds << " steps differ from the reference";
}

// ---- 3. Two threads, each with its own group ---------------------------------------------------

constexpr int kThreadSteps = 50;

// What one thread drives: its stream, its buffers and its handle (made with step 0's routing).
// They are all made on the main thread before either thread starts: CUDA may hold back every
// later launch on the device behind the kernels already running when a thread allocates
// device or page-locked memory (the programming guide's implicit synchronization; creating a
// handle allocates too), and a kernel of the other group waits for its peers, whose threads can
// be held back the same way, so an allocation while the other group steps can leave both
// groups waiting for each other across ranks until they time out (seen on 3 H200 when each
// thread allocated its own; the header's conventions).
struct LlDriver {
  Stream stream;
  ll::LlBuffers buffers;
  HandlePtr handle;
};

struct HtDriver {
  Stream stream;
  ht::HtBuffers buffers;
  HandlePtr handle;
};

ll::LlStep low_latency_step(const Shape& shape, int s) {
  const uint64_t seed = 84000 + 2 * static_cast<uint64_t>(s);
  return ll::make_step(ll::random_problem(shape, shape.max_topk, seed, true, 0.1), seed + 1, my_rank());
}

ht::HtStep high_throughput_step(const Shape& shape, int s) {
  const uint64_t seed = 85000 + 2 * static_cast<uint64_t>(s);
  return ht::make_step(ht::make_problem(shape, ht::random_spec(shape.max_topk, seed)), seed + 1, my_rank());
}

void prepare_low_latency(EpcGroup* group, const Shape& shape, LlDriver& d) {
  ASSERT_TRUE(d.stream.status());
  ASSERT_TRUE(d.buffers.allocate(shape, shape.max_topk));
  ASSERT_TRUE(d.buffers.upload(low_latency_step(shape, 0), d.stream.get()));
  ASSERT_TRUE(ll::create_handle(group, d.buffers, d.stream.get(), d.handle));
}

void prepare_high_throughput(EpcGroup* group, const Shape& shape, HtDriver& d) {
  ASSERT_TRUE(d.stream.status());
  ASSERT_TRUE(d.buffers.allocate(shape, shape.max_topk));
  ASSERT_TRUE(d.buffers.upload(high_throughput_step(shape, 0), ht::CallOptions(), d.stream.get()));
  ASSERT_TRUE(ht::create_handle(group, d.buffers, EPC_SIZING_CAPACITY, d.stream.get(), d.handle));
}

// The order in which the two threads queue their steps, the same on every rank: LL step 0,
// HT step 0, LL step 1, and so on; each thread checks its step after passing the turn, so
// the groups' kernels still overlap. Without an order the groups can wait for each other
// across ranks until they time out: a kernel waiting for its peers can hold back a later
// launch of another stream on its GPU (streams share CUDA's hardware queues), as the
// header's conventions say (docs/reliability.md has the runs). A thread that stops early (a
// failed assertion) leaves the turns to the other.
class Turns {
 public:
  // Blocks until it is `who`'s turn (0: LL, 1: HT) or the other thread has left.
  void wait(int who) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return next_ == who || left_[1 - who]; });
  }
  void pass(int who) { hand_over(who, false); }
  void leave(int who) { hand_over(who, true); }

 private:
  void hand_over(int who, bool leaving) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      next_ = 1 - who;
      if (leaving) left_[who] = true;
    }
    changed_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  int next_ = 0;
  bool left_[2] = {false, false};
};

// Leaves the turns however the thread's function returns.
struct TurnsLeaver {
  Turns& turns;
  int who;
  ~TurnsLeaver() { turns.leave(who); }
};

constexpr int kLlTurn = 0;
constexpr int kHtTurn = 1;

// `kThreadSteps` LL steps on the driver's handle from the calling thread, new routing every
// step; counts the steps that differ from the reference into `failing`.
void drive_low_latency(LlDriver* d, const Shape& shape, Turns* turns, int* failing) {
  const TurnsLeaver leaver{*turns, kLlTurn};
  ASSERT_TRUE(cuda_ok(cudaSetDevice(context().env.device), "cudaSetDevice in the LL thread"));
  for (int s = 0; s < kThreadSteps; ++s) {
    const ll::LlStep step = low_latency_step(shape, s);
    turns->wait(kLlTurn);
    if (s > 0) {
      ASSERT_TRUE(d->buffers.upload(step, d->stream.get()));
      ASSERT_TRUE(ll::update_handle(d->handle.get(), d->buffers, d->stream.get()));
    }
    ASSERT_TRUE(ll::dispatch_and_combine(d->handle.get(), d->buffers, d->stream.get()));
    turns->pass(kLlTurn);
    if (!d->buffers.check(step, d->stream.get(), "LL thread, step " + std::to_string(s),
                          *failing < kMaxReportedSteps)) {
      ++*failing;
    }
  }
}

// The same with HT steps on one CAPACITY handle.
void drive_high_throughput(HtDriver* d, const Shape& shape, Turns* turns, int* failing) {
  const TurnsLeaver leaver{*turns, kHtTurn};
  ASSERT_TRUE(cuda_ok(cudaSetDevice(context().env.device), "cudaSetDevice in the HT thread"));
  const ht::CallOptions options;
  for (int s = 0; s < kThreadSteps; ++s) {
    const ht::HtStep step = high_throughput_step(shape, s);
    turns->wait(kHtTurn);
    if (s > 0) {
      ASSERT_TRUE(d->buffers.upload(step, options, d->stream.get()));
      ASSERT_TRUE(ht::update_handle(d->handle.get(), d->buffers, d->stream.get()));
    }
    ASSERT_TRUE(ht::dispatch_and_combine(d->handle.get(), d->buffers, d->stream.get()));
    turns->pass(kHtTurn);
    if (!d->buffers.check(step, d->stream.get(), "HT thread, step " + std::to_string(s),
                          *failing < kMaxReportedSteps)) {
      ++*failing;
    }
  }
}

TEST(Concurrency, TwoThreadsEachDriveTheirOwnGroup) {
  const Shape ll_shape = world_shape(8, 1024, 32, 4);
  const Shape ht_shape = world_shape(8, 1024, 128, 4);
  GroupPtr ll_group, ht_group;
  ASSERT_TRUE(create_group_with_sms(ll_shape, EPC_MODE_LOW_LATENCY, kLlSms, ll_group));
  ASSERT_TRUE(create_group_with_sms(ht_shape, EPC_MODE_HIGH_THROUGHPUT, kHtSms, ht_group));
  LlDriver ll_driver;
  HtDriver ht_driver;
  ASSERT_NO_FATAL_FAILURE(prepare_low_latency(ll_group.get(), ll_shape, ll_driver));
  ASSERT_NO_FATAL_FAILURE(prepare_high_throughput(ht_group.get(), ht_shape, ht_driver));
  int ll_failing = 0, ht_failing = 0;
  Turns turns;
  std::thread ll_thread(drive_low_latency, &ll_driver, ll_shape, &turns, &ll_failing);
  std::thread ht_thread(drive_high_throughput, &ht_driver, ht_shape, &turns, &ht_failing);
  ll_thread.join();
  ht_thread.join();
  EXPECT_EQ(ll_failing, 0) << ll_failing << " of " << kThreadSteps << " LL steps differ from the reference";
  EXPECT_EQ(ht_failing, 0) << ht_failing << " of " << kThreadSteps << " HT steps differ from the reference";
}

}  // namespace
}  // namespace epc::gputest
