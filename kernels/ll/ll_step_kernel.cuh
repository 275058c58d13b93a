// SPDX-License-Identifier: Apache-2.0
// One launch per low-latency operation when it can be: the sending and receiving parts of a
// dispatch (or combine) as one kernel saves a launch and the gap between two kernels. The
// receiving part spins until every peer has sent, so the fused kernel is only launched when
// all its blocks can be resident at once (else a waiting block could keep a sending block
// of the same launch off the GPU until the timeout); otherwise the two parts run as two
// kernels, as they always do for EPC_STEP_SEND_ONLY.
//
// `Parts` names an operation: its parameter struct (Params), its direction's state in LlState
// (op), its index in the handle's step records (kRecord), the phase a slot-credit timeout
// reports (kSlotPhase), its phase-trace ring (phase_trace, -Dphase_trace=true builds), the
// loads its sending part makes before the slot is claimed (Early, early), a launch's block
// size (threads: kLlThreads or kLlSmallThreads), its two parts
// (send, receive, run by every thread of every block, given the step the launch serves and
// what early loaded, which receive gets only in a fused launch (`fused`), and told whether
// the launch is alone in its group (`alone`: a kernel of its own, below); send returns in
// every thread of a block whether the block was the launch's last to finish, after which it
// has signalled every peer; receive returns in every thread of a block whether the block saw
// every peer's signal) and the dynamic shared memory each needs (send_shared,
// receive_shared).
//
// A fused launch's rank sends itself nothing through the window where its receiving part can
// read the rows where they are (the caller's tokens, the expert outputs): a split step's
// inputs may change between its two launches, a fused one's cannot. It does not signal
// itself either, nor wait for its own signal, so on one rank a fused step waits for nothing.
//
// A fused launch alone in its group (fused_launch_alone) has nothing to send and no signal to
// send or wait for. It is a kernel of its own (kAlone), without the sending part, whose
// registers and code are those of the parts it runs. Its blocks neither claim the slot nor
// count themselves: it writes nothing into the window, the slot's previous step is over (the
// host never gives a step a slot that a pending step holds, and this rank's earlier launches
// ran before this one), and only block 0 needs the step, since the receiving part waits for no
// signal. Block 0's first thread reads the direction's state at its start and, after its
// receiving part, gives what a previous whole step owed (to this rank's own credit word, which
// a later split step waits for) and records the step, with no load left to wait for
// (load_alone_state, record_alone).
//
// A sending launch serves the direction's next step: every block reads the number at its
// start and claims the step's slot (ll_slot_credit.cuh) before it sends; the last block to
// finish the sending part, which every block has passed, records the step in the handle and
// moves the number and the slot's state on. A receive-only launch (epc_complete) serves the
// step its handle recorded, so the handles of a group complete in any order; its last block
// gives the slot's credits. A fused launch's receiving part ends as it did before slots were
// shared: block 0 notes the whole step received, and the next sending launch gives its
// credits. A
// failed wait leaves everything: the group is failed.
#pragma once

#include <cuda_runtime.h>

#include "kernels/common/kernel_stack.hpp"
#include "kernels/common/resident_blocks.hpp"
#include "kernels/device/launch_done.cuh"
#include "kernels/ll/ll_own_messages.cuh"
#include "kernels/ll/ll_slot_credit.cuh"
#ifdef EPC_PHASE_TRACE
#include "kernels/device/phase_stamp.cuh"
#endif
#include "kernels/wire/ll_state.hpp"

namespace epc::kernels {

// A block's threads: kLlThreads, or kLlSmallThreads for a launch whose Parts::threads says
// its items are small (a block's barriers then cost less; docs/tuning.md). The kernels work
// on any block size up to kLlThreads: every loop strides by blockDim.x.
constexpr int kLlThreads = 512;
constexpr int kLlSmallThreads = 256;

// The step's record, written by one thread; `whole_slots`: the direction's mask before it.
// `whole`: the launch also receives the step (fused), whose credits the next sending launch
// gives.
template <typename Parts>
__device__ __forceinline__ void write_step_record(const typename Parts::Params& p, LlOpState* op, uint64_t step,
                                                  bool whole, uint32_t whole_slots) {
  p.common.handle.steps[Parts::kRecord] = step;
  op->slot_epoch[p.slot] = step + 1;
  op->next_step = step + 1;
  const uint32_t bit = 1u << p.slot;
  op->whole_slots = whole ? (whole_slots | bit) : (whole_slots & ~bit);
  op->owed_epoch = whole ? step + 1 : 0;
  op->owed_signal_offset = p.signal_offset;
}

// Called by every thread of the block that finished a sending part last.
template <typename Parts>
__device__ __forceinline__ void record_step(const typename Parts::Params& p, LlOpState* op, uint64_t step, bool whole) {
  __syncthreads();  // the second warp has read what a previous whole step owed
  if (threadIdx.x == 0) write_step_record<Parts>(p, op, step, whole, op->whole_slots);
}

// Called by every thread of every block of a receiving launch after its receiving part.
template <typename Parts>
__device__ __forceinline__ void finish_step(const typename Parts::Params& p, LlOpState* op, uint64_t step, bool fused,
                                            bool received) {
  if (!received) return;
  if (fused) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    note_whole_received(op, step);
#ifdef EPC_PHASE_TRACE
    stamp_phase(Parts::phase_trace(p.common), step, kLlPhaseReceiveDone);
#endif
    return;
  }
  // The credits go to other GPUs: the last block's fence is system-scope.
  if (!last_block_to_finish(&op->receive_done[p.slot], /*publish_system=*/true)) return;
  if (threadIdx.x < kWarpSize) {
    warp_give_slot_credits(p.common.transport, p.signal_offset, p.common.geo.nranks, p.common.geo.rank, step);
  }
#ifdef EPC_PHASE_TRACE
  if (threadIdx.x == 0) stamp_phase(Parts::phase_trace(p.common), step, kLlPhaseReceiveDone);
#endif
}

// What thread 0 of block 0 of a launch alone reads of its direction's state at its start: the
// step, what a previous whole step owed and the whole-step mask, so that its record at the end
// waits for no load (every other thread reads nothing).
struct AloneState {
  uint64_t step;
  uint64_t owed_epoch;
  uint64_t owed_signal_offset;
  uint32_t whole_slots;
};

template <typename Parts>
__device__ __forceinline__ AloneState load_alone_state(const typename Parts::Params& p, const LlOpState* op) {
  AloneState s{0, 0, 0, 0};
  if (blockIdx.x != 0 || threadIdx.x != 0) return s;
  s.step = op->next_step;
  s.owed_epoch = op->owed_epoch;
  s.owed_signal_offset = op->owed_signal_offset;
  s.whole_slots = op->whole_slots;
#ifdef EPC_PHASE_TRACE
  // No payload to send and no signal: the sending phases are empty.
  for (int phase = kLlPhaseStart; phase <= kLlPhaseSignalsSent; ++phase)
    stamp_phase(Parts::phase_trace(p.common), s.step, static_cast<LlPhase>(phase));
#endif
  return s;
}

// Called by every thread of every block of a launch alone after its receiving part: the thread
// that loaded the state gives what a previous whole step owed (to its one rank, so one thread
// is the whole warp warp_give_owed_credits asks for) and records the step, as a sending part's
// last block does.
template <typename Parts>
__device__ __forceinline__ void record_alone(const typename Parts::Params& p, LlOpState* op, const AloneState& s) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  static_assert(kLlAloneRanks <= kWarpSize, "one lane gives every owed credit of a launch alone");
  if (s.owed_epoch != 0) {
    warp_give_owed_credits(p.common.transport, s.owed_signal_offset, p.common.geo.nranks, p.common.geo.rank,
                           s.owed_epoch - 1);
  }
  write_step_record<Parts>(p, op, s.step, /*whole=*/true, s.whole_slots);
}

// The parameters a launch alone runs its parts on: a copy whose geometry says one rank, rank 0,
// and whose transport says one node (what the launch's own say, since it is alone), in
// constants: the parts read the geometry through references that the compiler does not tie
// to one load, so even a test of the launch's own parameters would leave it unknown, while on
// the copy every path for other ranks' messages (signal waits, stored messages, loops over
// sources) compiles away. The smaller kernel is faster to fetch: a step's kernels take turns
// on each SM, so a launch meets its code mostly outside the SM's instruction cache. The copy
// stays in registers (ptxas -v: no stack beyond the launch's own).
template <typename Parts>
__device__ __forceinline__ typename Parts::Params alone_params(const typename Parts::Params& p) {
  typename Parts::Params q = p;
  q.common.transport.one_node = true;
  q.common.geo.nranks = kLlAloneRanks;
  q.common.geo.rank = 0;
  return q;
}

template <typename Parts, bool kSend, bool kReceive, bool kAlone>
__device__ __forceinline__ void ll_step(const typename Parts::Params& p) {
  static_assert(!kAlone || (kSend && kReceive), "a launch alone in its group is a fused one");
  LlOpState* op = Parts::op(p.common.state);
  uint64_t step;
  typename Parts::Early early{};
  if (kAlone) {
    // Only block 0's first thread knows the step; the others pass none to the receiving part,
    // which waits for no signal.
    const AloneState alone = load_alone_state<Parts>(p, op);
    const typename Parts::Params q = alone_params<Parts>(p);
    early = Parts::template early<kReceive>(q);
    finish_step<Parts>(q, op, alone.step, /*fused=*/true, Parts::template receive<kSend, true>(q, alone.step, early));
    record_alone<Parts>(q, op, alone);
    return;
  }
  if (kSend) {
    step = op->next_step;
    // Loads of the caller's inputs and the handle's routing, which no earlier step of the
    // slot can still be using: issued before the claim so that they overlap its load.
    early = Parts::template early<kReceive>(p);
    if (!claim_slot(p.common, op, p.slot, p.signal_offset, Parts::kSlotPhase)) return;
    if (Parts::template send<kReceive>(p, step, early)) {
      record_step<Parts>(p, op, step, /*whole=*/kReceive);
    }
  } else {
    step = p.common.handle.steps[Parts::kRecord];
  }
  if (kReceive) finish_step<Parts>(p, op, step, /*fused=*/kSend, Parts::template receive<kSend, false>(p, step, early));
}

// kOneNode: a launch on a one-node group, which runs on a copy of its parameters whose
// transport says so in a constant (HT's fold_one_node does the same), so that the network
// branches compile away; the other instances read their parameters where they are.
template <typename Parts, bool kSend, bool kReceive, bool kAlone = false, bool kOneNode = false>
__global__ void __launch_bounds__(kLlThreads, 1) ll_step_kernel(typename Parts::Params p) {
  if (kOneNode) {
    typename Parts::Params q = p;
    q.common.transport.one_node = true;
    ll_step<Parts, kSend, kReceive, kAlone>(q);
  } else {
    ll_step<Parts, kSend, kReceive, kAlone>(p);
  }
}

// The kernel of a launch that is not alone: the one-node instance on a one-node group.
template <typename Parts, bool kSend, bool kReceive>
cudaError_t launch_ll_kernel(const typename Parts::Params& params, int blocks, int threads, size_t shared,
                             cudaStream_t stream) {
  if (params.common.transport.one_node) {
    ll_step_kernel<Parts, kSend, kReceive, false, true><<<blocks, threads, shared, stream>>>(params);
  } else {
    ll_step_kernel<Parts, kSend, kReceive, false, false><<<blocks, threads, shared, stream>>>(params);
  }
  return cudaGetLastError();
}

template <typename Parts>
cudaError_t launch_ll_send(const typename Parts::Params& params, int blocks, cudaStream_t stream) {
  return launch_ll_kernel<Parts, true, false>(params, blocks, Parts::threads(params), Parts::send_shared(params),
                                              stream);
}

template <typename Parts>
cudaError_t launch_ll_receive(const typename Parts::Params& params, int blocks, cudaStream_t stream) {
  return launch_ll_kernel<Parts, false, true>(params, blocks, Parts::threads(params), Parts::receive_shared(params),
                                              stream);
}

// Blocks of the fused kernel of `Parts` (kAlone: the one of a launch alone in its group) that
// fit on the device at once, for blocks of `threads` threads (kLlThreads or kLlSmallThreads).
template <typename Parts, bool kAlone, bool kOneNode = false>
int fused_capacity(int threads, size_t shared) {
  static ResidentBlocks full(kLlThreads), small(kLlSmallThreads);
  return (threads == kLlSmallThreads ? small : full).get(ll_step_kernel<Parts, true, true, kAlone, kOneNode>, shared);
}

// Both parts: fused over the larger of the two block counts when it fits, else one after
// the other.
template <typename Parts>
cudaError_t launch_ll_step(const typename Parts::Params& params, int send_blocks, int receive_blocks,
                           cudaStream_t stream) {
  const int blocks = send_blocks > receive_blocks ? send_blocks : receive_blocks;
  const size_t send_shared = Parts::send_shared(params), receive_shared = Parts::receive_shared(params);
  const size_t shared = send_shared > receive_shared ? send_shared : receive_shared;
  const int threads = Parts::threads(params);
  if (fused_launch_alone(params.common.geo) && blocks <= fused_capacity<Parts, true>(threads, shared)) {
    ll_step_kernel<Parts, true, true, true><<<blocks, threads, shared, stream>>>(params);
    return cudaGetLastError();
  }
  const int capacity = params.common.transport.one_node ? fused_capacity<Parts, false, true>(threads, shared)
                                                        : fused_capacity<Parts, false, false>(threads, shared);
  if (!fused_launch_alone(params.common.geo) && blocks <= capacity) {
    return launch_ll_kernel<Parts, true, true>(params, blocks, threads, shared, stream);
  }
  const cudaError_t sent = launch_ll_send<Parts>(params, send_blocks, stream);
  return sent != cudaSuccess ? sent : launch_ll_receive<Parts>(params, receive_blocks, stream);
}

template <typename Parts>
size_t ll_step_local_bytes() {
  return max_local_bytes(
      ll_step_kernel<Parts, true, true>, ll_step_kernel<Parts, true, true, true>, ll_step_kernel<Parts, true, false>,
      ll_step_kernel<Parts, false, true>, ll_step_kernel<Parts, true, true, false, true>,
      ll_step_kernel<Parts, true, false, false, true>, ll_step_kernel<Parts, false, true, false, true>);
}

}  // namespace epc::kernels
