// SPDX-License-Identifier: Apache-2.0
// The launch functions core/ calls, each returning the CUDA launch status; their parameter
// structs (passed by value to the kernels) are in kernels/wire/. With wire/, the only part
// of kernels/ that core/ may include (docs/design.md). Nothing here blocks.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "kernels/wire/device_error.hpp"
#include "kernels/wire/ht_params.hpp"
#include "kernels/wire/ll_params.hpp"

namespace epc::kernels {

// Every rank of the group signals `epoch` into its own word of every rank's inbox (its own
// included), then waits until every word of its own inbox holds at least `epoch`. Ranks of
// other nodes are reached through the network transport, like every other signal.
struct GroupBarrierParams {
  PeerTransport transport;
  uint64_t inbox_offset;  // window offset of the [nranks] uint64 inbox
  uint64_t epoch;         // strictly increasing, identical on every rank
  uint64_t timeout_ns;
  DeviceError* error;  // device view of the group's error record
  int rank;
  int nranks;
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
cudaError_t launch_ll_dispatch(const LlDispatchParams& params, int send_blocks, int recv_blocks, cudaStream_t stream);

// Low-latency combine: the send half pre-reduces each received token over this rank's
// experts and returns it; the receive half sums the partials per token.
cudaError_t launch_ll_combine_send(const LlCombineParams& params, int blocks, cudaStream_t stream);
cudaError_t launch_ll_combine_recv(const LlCombineParams& params, int blocks, cudaStream_t stream);
cudaError_t launch_ll_combine(const LlCombineParams& params, int send_blocks, int recv_blocks, cudaStream_t stream);

// Gives the credits of a slot's last step back to every source without reading it: one warp.
cudaError_t launch_ll_slot_release(const LlSlotReleaseParams& params, cudaStream_t stream);

// High-throughput layout: one block numbers this rank's rows on every rank, exchanges the
// counts with every rank and fills the handle's layout arrays (kernels/wire/ht_params.hpp).
cudaError_t launch_ht_layout(const HtLayoutParams& params, cudaStream_t stream);
// A handle whose steps run in parts, after every part's layout: the rows of each part placed
// behind those of the parts before it, and the whole step's counts (kernels/ht/ht_parts.cu).
cudaError_t launch_ht_parts_layout(const HtPartsLayout& params, cudaStream_t stream);
// EXPERT_PACKED handles, before the layout: fills HtEntryOrder::positions
// (kernels/ht/ht_entry_order.cu); `temp` holds ht_entry_order_temp_bytes(T * K, E).
cudaError_t launch_ht_entry_order(const HtEntryOrder& order, cudaStream_t stream);
size_t ht_entry_order_temp_bytes(int max_entries, int num_experts);

// High-throughput dispatch and combine over `blocks` blocks (the SM budget): sending and
// receiving warps in one launch when the grid fits on the GPU, else two launches; or one
// half of a split step (HtHalves), the receiving half after the sending half of the same
// step with no other step of the operation on the group in between.
cudaError_t launch_ht_dispatch(const HtDispatchParams& params, int blocks, cudaStream_t stream,
                               HtHalves halves = HtHalves::kBoth);
cudaError_t launch_ht_combine(const HtCombineParams& params, int blocks, cudaStream_t stream,
                              HtHalves halves = HtHalves::kBoth);
// Dispatch over the node's rings (HtDispatchParams::rings) runs fused only: the most blocks
// such a launch may have (launch_ht_dispatch refuses more, and any split).
int ht_dispatch_rings_fused_blocks();
int ht_combine_rings_fused_blocks();
// Ends a step whose sending half ran and whose receiving half never will (a handle
// destroyed with it pending), as the receiving half's last block would: acknowledged to
// every rank, the step counter moved on. One block of one warp.
cudaError_t launch_ht_dispatch_abandon(const HtDispatchParams& params, cudaStream_t stream);
cudaError_t launch_ht_combine_abandon(const HtCombineParams& params, cudaStream_t stream);

// GIN set-up and tear-down (groups spanning LSA teams; `state` is the group's GinState in
// device memory). Zeroes signals [0, count) of context 0 (NCCL leaves a freed device
// communicator's signals as they were, and hands their ids out again); and waits until
// context 0's puts have read their sources (NCCL's flush, which spins without a bound: the
// host bounds it by polling the stream).
cudaError_t launch_gin_reset_signals(const GinState* state, uint32_t count, cudaStream_t stream);
cudaError_t launch_gin_flush(const GinState* state, cudaStream_t stream);

// The addresses of the windows of world ranks [first, first + count) (this rank's node) at
// offset 0, then this rank's own: `out` [count + 1] in device memory. One block.
cudaError_t launch_window_pointers(ncclWindow_t window, int first, int count, uint64_t* out, cudaStream_t stream);

// The most per-thread local memory (bytes, stack frames and spills) any kernel above needs,
// and its parts per file (kernels/common/kernel_stack.hpp says why group creation reserves it).
size_t max_kernel_local_bytes();
size_t group_barrier_local_bytes();
size_t routing_copy_local_bytes();
size_t gin_lifecycle_local_bytes();
size_t window_pointers_local_bytes();
size_t ll_dispatch_local_bytes();
size_t ll_combine_local_bytes();
size_t ht_layout_local_bytes();
size_t ht_dispatch_local_bytes();
size_t ht_combine_local_bytes();

}  // namespace epc::kernels
