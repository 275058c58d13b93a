// SPDX-License-Identifier: Apache-2.0
// One process driving several GPUs, one thread per rank: the bootstrap, group creation,
// barriers and destruction must all work concurrently inside one process.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "epcomm/epcomm.h"

namespace {

int g_ranks = 0;

std::string thread_error() {
  char buf[2048];
  epc_last_error(buf, sizeof buf, nullptr);
  return buf;
}

// One rank's whole life; returns "" on success, else what failed.
std::string rank_life(const EpcUniqueId& id, int rank) {
  void* comm = nullptr;
  if (epc_comm_init(&id, g_ranks, rank, rank, &comm) != EPC_OK) return "comm_init: " + thread_error();
  std::string failure;
  for (int round = 0; round < 2 && failure.empty(); ++round) {
    EpcGroupConfig c = EPC_GROUP_CONFIG_INIT;
    c.num_experts = 16u * static_cast<uint32_t>(g_ranks);
    c.hidden = 4096;
    c.mode = round == 0 ? EPC_MODE_LOW_LATENCY : EPC_MODE_HIGH_THROUGHPUT;
    EpcGroup* group = nullptr;
    if (epc_group_create(comm, &c, &group) != EPC_OK) {
      failure = "group_create: " + thread_error();
      break;
    }
    EpcGroupInfo info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    info.abi_version = EPC_ABI_VERSION;
    if (epc_group_query(group, &info) != EPC_OK) failure = "query: " + thread_error();
    if (failure.empty() &&
        (info.rank != rank || info.nranks != g_ranks || info.cuda_device != rank || info.lsa_size != g_ranks)) {
      failure = "query returned rank " + std::to_string(info.rank) + " of " + std::to_string(info.nranks) +
                " on device " + std::to_string(info.cuda_device);
    }
    for (int i = 0; i < 20 && failure.empty(); ++i) {
      if (epc_group_barrier(group, nullptr) != EPC_OK) failure = "barrier: " + thread_error();
    }
    if (epc_group_destroy(group) != EPC_OK && failure.empty()) failure = "destroy: " + thread_error();
  }
  if (epc_comm_destroy(comm) != EPC_OK && failure.empty()) failure = "comm_destroy: " + thread_error();
  return failure;
}

TEST(OneProcessManyGpus, EveryThreadRunsTheGroupLifecycle) {
  EpcUniqueId id;
  ASSERT_EQ(epc_unique_id_create(&id), EPC_OK) << thread_error();
  std::vector<std::string> failures(static_cast<size_t>(g_ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < g_ranks; ++r) {
    threads.emplace_back([&, r] { failures[static_cast<size_t>(r)] = rank_life(id, r); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < g_ranks; ++r) EXPECT_EQ(failures[static_cast<size_t>(r)], "") << "rank " << r;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices < 2) {
    std::fprintf(stderr, "SKIP: one-process-many-GPUs needs 2 or more CUDA GPUs (%s, %d visible)\n",
                 err == cudaSuccess ? "ok" : cudaGetErrorString(err), err == cudaSuccess ? devices : 0);
    return 77;
  }
  g_ranks = devices < 4 ? devices : 4;
  std::printf("one process, %d GPUs, one thread each\n", g_ranks);
  return RUN_ALL_TESTS();
}
