// SPDX-License-Identifier: Apache-2.0
// The multi-process GPU suite: the harness starts one process per rank; each creates its
// NCCL communicator through epcomm's bootstrap calls and runs the same GoogleTest cases in
// the same order, so the collective calls inside them line up across ranks.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/gpu/rank_context.hpp"
#include "tests/harness/harness.hpp"

namespace {

int rank_main(const epc::harness::RankEnv& env, int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  epc::gputest::RankContext ctx;
  ctx.env = env;
  EpcStatus s = epc_comm_init(&env.unique_id, env.world_size, env.rank, env.device, &ctx.comm);
  if (s != EPC_OK) {
    std::fprintf(stderr, "epc_comm_init failed: %s: %s\n", epc_status_string(s), epc::gputest::last_error().c_str());
    return 1;
  }
  epc::gputest::set_context(ctx);
  int result = RUN_ALL_TESTS();
  s = epc_comm_destroy(ctx.comm);
  if (s != EPC_OK) {
    std::fprintf(stderr, "epc_comm_destroy failed: %s\n", epc::gputest::last_error().c_str());
    return 1;
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) { return epc::harness::run(argc, argv, rank_main); }
