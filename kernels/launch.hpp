// The one narrow interface from core/ into kernels/: parameter structs (passed by value to
// the kernels) and launch functions returning the CUDA launch status. Nothing here blocks.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "kernels/device_error.hpp"
#include "kernels/ht_params.hpp"
#include "kernels/ll_params.hpp"

namespace epc::kernels {

// Every rank of the LSA team stores `epoch` into its own inbox slot in every peer's window,
// then waits until every peer's slot in its own window holds at least `epoch`.
struct GroupBarrierParams {
  ncclDevComm dev_comm;
  ncclWindow_t window;
  uint64_t inbox_offset;   // window offset of the [slots][lsa_size] uint64 inboxes
  uint32_t slot;           // which barrier (independent epoch sequences)
  uint32_t reserved;
  uint64_t epoch;          // strictly increasing per slot, identical on every rank
  uint64_t timeout_ns;
  DeviceError* error;      // device view of the group's error record
};

cudaError_t launch_group_barrier(const GroupBarrierParams& params, cudaStream_t stream);

// Copies routing into the handle as int32; ids outside [-1, num_experts) become -1 and are
// reported in the group's error record (never used as an address).
cudaError_t launch_routing_copy(const RoutingCopyParams& params, cudaStream_t stream);

// Low-latency dispatch: the send half writes each token once into every destination rank's
// receive slot and signals; the receive half waits for every source and unpacks
// expert-major. `blocks` is the SM budget.
cudaError_t launch_ll_dispatch_send(const LlDispatchParams& params, int blocks, cudaStream_t stream);
cudaError_t launch_ll_dispatch_recv(const LlDispatchParams& params, int blocks, cudaStream_t stream);
// Both halves: one fused launch when every block fits on the GPU at once, else the two above.
cudaError_t launch_ll_dispatch(const LlDispatchParams& params, int send_blocks, int recv_blocks,
                               cudaStream_t stream);

// Low-latency combine: the send half pre-reduces each received token over this rank's
// experts and returns it; the receive half sums the partials per token.
cudaError_t launch_ll_combine_send(const LlCombineParams& params, int blocks, cudaStream_t stream);
cudaError_t launch_ll_combine_recv(const LlCombineParams& params, int blocks, cudaStream_t stream);
cudaError_t launch_ll_combine(const LlCombineParams& params, int send_blocks, int recv_blocks,
                              cudaStream_t stream);

// High-throughput layout: one block numbers this rank's rows on every rank, exchanges the
// counts with every rank and fills the handle's layout arrays (kernels/ht_params.hpp).
cudaError_t launch_ht_layout(const HtLayoutParams& params, cudaStream_t stream);

// High-throughput dispatch and combine over `blocks` blocks (the SM budget): sending and
// receiving warps in one launch when the grid fits on the GPU, else two launches.
cudaError_t launch_ht_dispatch(const HtDispatchParams& params, int blocks, cudaStream_t stream);
cudaError_t launch_ht_combine(const HtCombineParams& params, int blocks, cudaStream_t stream);

// The most per-thread local memory (bytes, stack frames and spills) any kernel above needs,
// and its parts per file (kernels/kernel_stack.hpp says why group creation reserves it).
size_t max_kernel_local_bytes();
size_t ll_dispatch_local_bytes();
size_t ll_combine_local_bytes();
size_t ht_layout_local_bytes();
size_t ht_dispatch_local_bytes();
size_t ht_combine_local_bytes();

}  // namespace epc::kernels
