// SPDX-License-Identifier: Apache-2.0
// The group barrier over every rank of the group: proves every peer's window is mapped and
// reachable (through NVLink inside a node, the network transport between nodes), and
// separates phases that reuse memory. Unlike NCCL's barriers, every wait is bounded: a peer
// that never arrives is reported (phase, waiting rank, missing peer) and the kernel returns
// instead of hanging.
#include "kernels/common/kernel_stack.hpp"
#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/launch.hpp"
#include "kernels/transport/peer_transport.cuh"

namespace epc::kernels {

namespace {

__global__ void group_barrier_kernel(GroupBarrierParams p) {
  const PeerTransport& t = p.transport;
  const uint64_t mine = p.inbox_offset + static_cast<uint64_t>(p.rank) * sizeof(uint64_t);
  for (int peer = threadIdx.x; peer < p.nranks; peer += blockDim.x) t.signal(mine, peer, p.epoch);
  wait_for_every_peer_signal(t, p.inbox_offset, p.nranks, AtLeast{p.epoch}, nullptr, p.timeout_ns, p.error,
                             kPhaseGroupBarrier, p.rank);
}

}  // namespace

cudaError_t launch_group_barrier(const GroupBarrierParams& params, cudaStream_t stream) {
  group_barrier_kernel<<<1, 32, 0, stream>>>(params);
  return cudaGetLastError();
}

size_t group_barrier_local_bytes() { return max_local_bytes(group_barrier_kernel); }

}  // namespace epc::kernels
