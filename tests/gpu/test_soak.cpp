// SPDX-License-Identifier: Apache-2.0
// Soak: one communicator with a low-latency and a high-throughput group alive together, and
// EPCOMM_SOAK_STEPS (default 10000) steps on one stream, each an LL step (epc_handle_update,
// epc_dispatch, epc_combine on the LL group) followed by an HT step (epc_handle_update
// of a CAPACITY handle, epc_dispatch, epc_combine on the HT group): the graph-safe
// per-step calls, no allocation and no host synchronisation. Routing changes every step: step
// s's routing is drawn from a seed of s (the same on every rank) and uploaded before the loop.
// Every 100th step and the last instead upload a full reference problem for both modes and
// compare bit for bit. Device memory (cudaMemGetInfo) and host memory (RSS) are measured
// after step 100 and at the end and must stay flat.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"

namespace epc::gputest {
namespace {

constexpr int K = 4;
constexpr int kDefaultSteps = 10000;
constexpr int kCheckEvery = 100;
constexpr int kPoolSteps = 10000;  // routings drawn; longer runs reuse them in turn
constexpr std::size_t kMiB = 1024 * 1024;
constexpr std::size_t kDeviceGrowthLimit = 4 * kMiB;
constexpr std::size_t kHostGrowthLimit = 16 * kMiB;

// EPCOMM_SOAK_STEPS, or the default; 0 when the variable is not a positive number.
int soak_steps() {
  const char* text = std::getenv("EPCOMM_SOAK_STEPS");
  if (text == nullptr || *text == '\0') return kDefaultSteps;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' && value > 0 && value <= 100000000 ? static_cast<int>(value) : 0;
}

// One routing per step, [T, K] int32 each, in device memory, uploaded once.
class RoutingPool {
 public:
  // Step s's routing of every rank is drawn from seed `salt` + s in a fixed order (so it is
  // the same on every rank): K distinct experts per token, each entry then masked with
  // probability 1/10. This rank's part is kept.
  ::testing::AssertionResult build(const Shape& shape, int steps, uint64_t salt, cudaStream_t stream) {
    entries_ = static_cast<std::size_t>(shape.max_tokens) * K;
    tokens_ = shape.max_tokens;
    count_ = std::min(steps, kPoolSteps);
    std::vector<int32_t> host(entries_ * static_cast<std::size_t>(count_));
    for (int s = 0; s < count_; ++s) {
      std::mt19937_64 engine(salt + static_cast<uint64_t>(s));
      for (int r = 0; r < shape.nranks; ++r) {
        for (int t = 0; t < shape.max_tokens; ++t) {
          int32_t row[K];
          for (int k = 0; k < K; ++k) {
            do {
              row[k] = static_cast<int32_t>(engine() % static_cast<uint64_t>(shape.num_experts));
            } while (std::find(row, row + k, row[k]) != row + k);
          }
          for (int k = 0; k < K; ++k) {
            const bool masked = unit_float(engine) < 0.1f;
            if (r != my_rank()) continue;
            host[s * entries_ + static_cast<std::size_t>(t) * K + k] = masked ? -1 : row[k];
          }
        }
      }
    }
    ::testing::AssertionResult r = memory_.allocate(host.size() * sizeof(int32_t), "routing pool");
    if (r) r = upload_bytes(memory_.get(), host.data(), host.size() * sizeof(int32_t), stream, "routing pool");
    if (r) r = cuda_ok(cudaStreamSynchronize(stream), "uploading the routing pool");
    return r;
  }

  EpcTensor at(int step) const {
    auto* first = static_cast<int32_t*>(memory_.get()) + (step % count_) * entries_;
    return make_tensor(first, EPC_DTYPE_INT32, {tokens_, K});
  }

 private:
  DeviceMemory memory_;
  std::size_t entries_ = 0;
  int tokens_ = 0;
  int count_ = 1;
};

struct MemoryUse {
  std::size_t device_free = 0;
  std::size_t host_rss = 0;
};

::testing::AssertionResult measure(MemoryUse& out) {
  std::size_t total = 0;
  ::testing::AssertionResult r = cuda_ok(cudaMemGetInfo(&out.device_free, &total), "cudaMemGetInfo");
  unsigned long long size = 0, resident = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  const bool read = statm != nullptr && std::fscanf(statm, "%llu %llu", &size, &resident) == 2;
  if (statm != nullptr) std::fclose(statm);
  if (!read) return ::testing::AssertionFailure() << "cannot read /proc/self/statm";
  out.host_rss = static_cast<std::size_t>(resident) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return r;
}

double mib(std::size_t bytes) { return static_cast<double>(bytes) / kMiB; }

TEST(Soak, AlternatingLowLatencyAndHighThroughput) {
  const int steps = soak_steps();
  ASSERT_GT(steps, 0) << "EPCOMM_SOAK_STEPS must be a positive number of steps";
  const Shape shape = world_shape(8, 1024, 64, K);
  GroupPtr ll_group, ht_group;
  ASSERT_TRUE(create_group(shape, EPC_MODE_LOW_LATENCY, ll_group));
  ASSERT_TRUE(create_group(shape, EPC_MODE_HIGH_THROUGHPUT, ht_group));
  Stream stream_owner;
  ASSERT_TRUE(stream_owner.status());
  const cudaStream_t stream = stream_owner.get();
  RoutingPool ll_pool, ht_pool;
  ASSERT_TRUE(ll_pool.build(shape, steps, 900000, stream));
  ASSERT_TRUE(ht_pool.build(shape, steps, 700000000, stream));
  ll::LlBuffers ll_buffers;
  ht::HtBuffers ht_buffers;
  ASSERT_TRUE(ll_buffers.allocate(shape, K));
  ASSERT_TRUE(ht_buffers.allocate(shape, K));
  const ht::CallOptions options;

  // Handles from step 0's pooled routing; every step then updates them.
  const EpcTensor ll_first = ll_pool.at(0), ht_first = ht_pool.at(0);
  HandlePtr ll_handle, ht_handle;
  ASSERT_TRUE(
      create_handle_with(ll_group.get(), handle_config(), &ll_first, stream, ll_handle, "epc_handle_create (LL)"));
  ASSERT_TRUE(create_handle_with(ht_group.get(), handle_config(EPC_SIZING_CAPACITY), &ht_first, stream, ht_handle,
                                 "epc_handle_create (HT, CAPACITY)"));
  EpcHandleInfo info{};
  ASSERT_TRUE(query_handle(ht_handle.get(), info));
  ht_buffers.set_handle(EPC_SIZING_CAPACITY, info.rows);

  ll::LlStep ll_step;
  ht::HtStep ht_step;
  int checks = 0, failing_checks = 0;
  MemoryUse baseline, end;
  bool have_baseline = false;
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    const bool check = s % kCheckEvery == 0 || s == steps - 1;
    const uint64_t seed = 1000000 + 10 * static_cast<uint64_t>(s);
    if (check) {
      ll_step = ll::make_step(ll::random_problem(shape, K, seed, false, 0.1), seed + 1, my_rank());
      ASSERT_TRUE(ll_buffers.upload(ll_step, stream));
      ASSERT_TRUE(ll::update_handle(ll_handle.get(), ll_buffers, stream));
    } else {
      const EpcTensor idx = ll_pool.at(s);
      ASSERT_TRUE(epc_ok(update_routing(ll_handle.get(), idx, stream), "epc_handle_update (LL)"));
    }
    ASSERT_TRUE(ll::dispatch_and_combine(ll_handle.get(), ll_buffers, stream));
    if (check) {
      ht::ProblemSpec spec = ht::random_spec(K, seed + 2);
      spec.random_token_counts = false;  // B = T: the pooled steps reuse the same x tensors
      ht_step = ht::make_step(ht::make_problem(shape, spec), seed + 3, my_rank());
      ASSERT_TRUE(ht_buffers.upload(ht_step, options, stream));
      ASSERT_TRUE(ht::update_handle(ht_handle.get(), ht_buffers, stream));
    } else {
      const EpcTensor idx = ht_pool.at(s);
      ASSERT_TRUE(epc_ok(update_routing(ht_handle.get(), idx, stream), "epc_handle_update (HT)"));
    }
    ASSERT_TRUE(ht::dispatch_and_combine(ht_handle.get(), ht_buffers, stream));
    if (!check) continue;
    ++checks;
    const std::string where = "soak step " + std::to_string(s);
    const bool report = failing_checks < kMaxReportedSteps;
    const bool ll_ok = ll_buffers.check(ll_step, stream, where + " (LL)", report);
    const bool ht_ok = ht_buffers.check(ht_step, stream, where + " (HT)", report);
    if (!ll_ok || !ht_ok) ++failing_checks;
    if (!have_baseline && s >= kCheckEvery) {
      ASSERT_TRUE(measure(baseline));
      have_baseline = true;
    }
  }
  ASSERT_TRUE(cuda_ok(cudaStreamSynchronize(stream), "the last step"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(measure(end));
  EXPECT_EQ(failing_checks, 0) << failing_checks << " of " << checks << " checked steps differ from the reference";

  std::printf(
      "rank %d: soak of %d steps (each one LL and one HT step) in %.2f s, %.1f us per "
      "step; %d steps compared with the reference\n",
      my_rank(), steps, seconds, seconds * 1e6 / steps, checks);
  if (!have_baseline) {
    std::printf("rank %d: fewer than %d steps, memory not compared\n", my_rank(), kCheckEvery + 1);
    return;
  }
  const std::size_t device_growth = baseline.device_free > end.device_free ? baseline.device_free - end.device_free : 0;
  const std::size_t host_growth = end.host_rss > baseline.host_rss ? end.host_rss - baseline.host_rss : 0;
  std::printf(
      "rank %d: after step %d -> at the end: device free %.1f -> %.1f MiB (used %.2f MiB "
      "more), host RSS %.1f -> %.1f MiB (%.2f MiB more)\n",
      my_rank(), kCheckEvery, mib(baseline.device_free), mib(end.device_free), mib(device_growth),
      mib(baseline.host_rss), mib(end.host_rss), mib(host_growth));
  EXPECT_LE(device_growth, kDeviceGrowthLimit) << "device memory grew during the soak";
  EXPECT_LE(host_growth, kHostGrowthLimit) << "host memory (RSS) grew during the soak";
}

}  // namespace
}  // namespace epc::gputest
