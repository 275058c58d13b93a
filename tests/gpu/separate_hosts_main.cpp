// SPDX-License-Identifier: Apache-2.0
// Ranks that NCCL believes are on separate hosts: every rank process gets an NCCL_HOSTID of
// its own before NCCL starts, so NCCL puts each rank in an NVLink (LSA) team of its own, as
// on a cluster of one GPU per node, and a group must use GIN between them.
//
// Where NCCL cannot provide GIN (our GPU machines have no NICs), creating a group must fail
// on every rank with EPC_ERR_UNSUPPORTED and a message saying why, quoting NCCL, and the
// communicator must stay usable for the next attempt. Where NCCL provides GIN, the groups
// must give exactly the reference model's outputs, as virtual nodes of one rank do.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/ht_case.hpp"
#include "tests/gpu/ll_case.hpp"
#include "tests/gpu/rank_context.hpp"
#include "tests/harness/harness.hpp"

namespace epc::gputest {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Creates a group of `mode`; true when it was created (GIN available), false when refused
// as it must be without GIN (failures recorded otherwise).
bool create_or_expect_gin_refusal(const Shape& shape, EpcMode mode, GroupPtr& out) {
  EpcGroupConfig config = group_config(shape, mode);
  EpcGroup* raw = nullptr;
  const EpcStatus status = epc_group_create(context().comm, &config, &raw);
  if (status == EPC_OK) {
    out.reset(raw);
    EpcGroupInfo info;
    info.struct_size = sizeof info;
    info.abi_version = EPC_ABI_VERSION;
    EXPECT_EQ(epc_group_query(raw, &info), EPC_OK);
    EXPECT_EQ(info.lsa_size, 1);
    EXPECT_EQ(info.num_nodes, context().env.world_size);
    EXPECT_EQ(info.node, my_rank());
    return true;
  }
  const std::string message = last_error();
  if (my_rank() == 0) std::printf("group creation across hosts refused as expected: %s\n", message.c_str());
  EXPECT_EQ(status, EPC_ERR_UNSUPPORTED) << message;
  EXPECT_EQ(raw, nullptr);
  const std::string world = std::to_string(context().env.world_size);
  EXPECT_TRUE(contains(message, "the " + world + " ranks span " + world + " NVLink (LSA) domains of 1 ranks"))
      << message;
  EXPECT_TRUE(contains(message, "GPU-initiated networking (GIN)")) << message;
  EXPECT_TRUE(contains(message, "ncclDevCommCreate with ")) << message;
  return false;
}

// Both modes, twice each: a refusal leaves the communicator usable for the next group.
TEST(SeparateHosts, GroupsUseGinOrAreRefusedWithNcclsReason) {
  const Shape shape = world_shape(8, 2048, 64, 8);
  for (int attempt = 0; attempt < 2; ++attempt) {
    GroupPtr ll_group;
    if (create_or_expect_gin_refusal(shape, EPC_MODE_LOW_LATENCY, ll_group)) {
      ref::Problem problem = ll::random_problem(shape, 8, 48000 + attempt, true, 0.1);
      ll::run_sequence(ll_group.get(), shape, {problem}, 48100 + attempt, "low latency across hosts");
    }
    GroupPtr ht_group;
    if (create_or_expect_gin_refusal(shape, EPC_MODE_HIGH_THROUGHPUT, ht_group)) {
      ht::ProblemSpec spec = ht::random_spec(8, 48200 + attempt);
      ref::Problem p = ht::make_problem(shape, spec);
      std::vector<ht::HtStep> steps;
      steps.push_back(ht::make_step(std::move(p), spec.seed + 1, my_rank(), false, /*node_size=*/1));
      ht::run_steps(ht_group.get(), shape, steps, EPC_SIZING_EXACT, {ht::CallOptions{}},
                    "high throughput across hosts");
    }
  }
}

int rank_main(const harness::RankEnv& env, int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // NCCL reads the host id once, at its first use: before the communicator exists.
  const std::string host = "epcomm-separate-host-" + std::to_string(env.rank);
  setenv("NCCL_HOSTID", host.c_str(), 1);
  RankContext ctx;
  ctx.env = env;
  EpcStatus s = epc_comm_init(&env.unique_id, env.world_size, env.rank, env.device, &ctx.comm);
  if (s != EPC_OK) {
    std::fprintf(stderr, "epc_comm_init failed: %s: %s\n", epc_status_string(s), last_error().c_str());
    return 1;
  }
  set_context(ctx);
  int result = RUN_ALL_TESTS();
  s = epc_comm_destroy(ctx.comm);
  if (s != EPC_OK) {
    std::fprintf(stderr, "epc_comm_destroy failed: %s\n", last_error().c_str());
    return 1;
  }
  return result;
}

}  // namespace
}  // namespace epc::gputest

int main(int argc, char** argv) { return epc::harness::run(argc, argv, epc::gputest::rank_main); }
