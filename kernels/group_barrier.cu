// The group barrier over LSA: proves every peer's window is mapped and reachable, and
// separates phases that reuse memory. Unlike NCCL's LSA barrier, every wait is bounded: a
// peer that never arrives is reported (phase, waiting rank, missing peer) and the kernel
// returns instead of hanging.
#include "kernels/device/deadline.cuh"
#include "kernels/device/flags.cuh"
#include "kernels/device/report.cuh"
#include "kernels/launch.hpp"

namespace epc::kernels {

namespace {

__device__ uint64_t inbox_offset(const GroupBarrierParams& p, int lsa_size, int writer) {
  return p.inbox_offset + (static_cast<uint64_t>(p.slot) * lsa_size + writer) * sizeof(uint64_t);
}

__global__ void group_barrier_kernel(GroupBarrierParams p) {
  const ncclTeam lsa = ncclTeamLsa(p.dev_comm);
  // Announce: my slot in every peer's inbox.
  for (int peer = threadIdx.x; peer < lsa.nRanks; peer += blockDim.x) {
    if (peer == lsa.rank) continue;
    auto* remote = static_cast<uint64_t*>(
        ncclGetLsaPointer(p.window, inbox_offset(p, lsa.nRanks, lsa.rank), peer));
    store_release(remote, p.epoch);
  }
  // Wait: every peer's slot in my inbox.
  for (int peer = threadIdx.x; peer < lsa.nRanks; peer += blockDim.x) {
    if (peer == lsa.rank) continue;
    auto* mine = static_cast<uint64_t*>(
        ncclGetLocalPointer(p.window, inbox_offset(p, lsa.nRanks, peer)));
    Deadline deadline(p.timeout_ns);
    while (load_acquire(mine) < p.epoch) {
      if (deadline.expired()) {
        report_failure(p.error, EPC_ERR_TIMEOUT, kPhaseGroupBarrier, p.dev_comm.rank,
                       ncclTeamRankToWorld(p.dev_comm, lsa, peer), deadline.elapsed_ns());
        break;
      }
      if (group_failed(p.error)) break;
    }
  }
}

}  // namespace

cudaError_t launch_group_barrier(const GroupBarrierParams& params, cudaStream_t stream) {
  group_barrier_kernel<<<1, 32, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace epc::kernels
