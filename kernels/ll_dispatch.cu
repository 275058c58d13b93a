// Low-latency dispatch. Send: one warp per token writes, for every destination rank hosting
// at least one of the token's experts, a message (header naming those experts and weights,
// then the row) into that rank's receive slot [source rank][token] over NVLink; tokens with
// no expert on a rank get a header-only message with zero entries, so receivers can scan
// slots 0..B-1 without stale data. The last block then signals every rank with (epoch, B).
// Receive: waits for every source's signal, then one warp per local expert scans the
// messages in (source, token, entry) order, assigns packed rows and copies the payloads.
#include "kernels/device/launch_done.cuh"
#include "kernels/device/peer_wait.cuh"
#include "kernels/device/row_copy.cuh"
#include "kernels/device/step_signal.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/launch.hpp"

namespace epc::kernels {

namespace {

constexpr int kThreads = 512;

struct MessageHeader {
  int32_t token;
  int32_t entries;
  // followed by `entries` pairs {int32 local expert, float weight}
};

__global__ void __launch_bounds__(kThreads) ll_dispatch_send_kernel(LlDispatchParams p) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  const uint64_t step = c.state->dispatch_step;
  const int slot = static_cast<int>(step & 1);
  const int lane = lane_id();

  for (int t = global_warp(); t < c.num_tokens; t += total_warps()) {
    int expert = -1;
    float weight = 0.0f;
    if (lane < c.topk) {
      expert = c.handle.topk_idx[t * c.topk + lane];
      weight = p.weights[t * c.topk + lane];
    }
    const int dest_of_lane = expert >= 0 ? expert / g.local_experts : -1;
    const char* row = static_cast<const char*>(p.x) + static_cast<size_t>(t) * g.row_bytes;
    for (int dest = 0; dest < g.nranks; ++dest) {
      const unsigned mask = __ballot_sync(0xffffffffu, dest_of_lane == dest);
      const size_t offset = p.recv_offset[slot] +
                            (static_cast<size_t>(g.rank) * g.max_tokens + t) * g.message_bytes;
      char* message = static_cast<char*>(ncclGetPeerPointer(c.window, offset, dest));
      auto* header = reinterpret_cast<MessageHeader*>(message);
      if (lane == 0) {
        header->token = t;
        header->entries = __popc(mask);
      }
      if (dest_of_lane == dest) {
        const int j = __popc(mask & ((1u << lane) - 1u));
        int32_t* entry = reinterpret_cast<int32_t*>(message + sizeof(MessageHeader)) + 2 * j;
        entry[0] = expert - dest * g.local_experts;
        reinterpret_cast<float*>(entry)[1] = weight;
      }
      if (mask != 0) warp_copy_row(message + g.header_bytes, row, g.row_bytes);
    }
  }

  if (last_block_to_finish(&c.state->dispatch_send_done)) {
    signal_every_peer(c.window, p.signal_offset[slot], g.nranks, g.rank, step, static_cast<uint32_t>(c.num_tokens));
  }
}

__global__ void __launch_bounds__(kThreads) ll_dispatch_recv_kernel(LlDispatchParams p) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  const uint64_t step = c.state->dispatch_step;
  const int slot = static_cast<int>(step & 1);
  const int lane = lane_id();
  extern __shared__ uint32_t tokens_from[];  // [nranks]

  auto* signals = static_cast<uint64_t*>(ncclGetLocalPointer(c.window, p.signal_offset[slot]));
  if (!wait_for_peers(signals, g.nranks, step_epoch(step), tokens_from, c.timeout_ns, c.error,
                      kPhaseDispatchReceive, c.dev_comm.rank)) {
    return;  // the failure is recorded; the step counter stays, the group is failed
  }
  if (blockIdx.x == 0) {
    for (int s = threadIdx.x; s < g.nranks; s += blockDim.x) c.handle.recv_tokens[s] = tokens_from[s];
  }

  const char* slots = static_cast<const char*>(ncclGetLocalPointer(c.window, p.recv_offset[slot]));
  const size_t expert_rows = static_cast<size_t>(g.nranks) * g.max_tokens;
  for (int l = global_warp(); l < g.local_experts; l += total_warps()) {
    int rows = 0;  // packed rows of expert l so far
    for (int s = 0; s < g.nranks; ++s) {
      const int count = static_cast<int>(tokens_from[s]);
      for (int t0 = 0; t0 < count; t0 += kWarpSize) {
        const int t = t0 + lane;
        const char* message = slots + (static_cast<size_t>(s) * g.max_tokens + t) * g.message_bytes;
        int mine = 0;
        int entries = 0;
        if (t < count) {
          entries = reinterpret_cast<const MessageHeader*>(message)->entries;
          const int32_t* entry = reinterpret_cast<const int32_t*>(message + sizeof(MessageHeader));
          for (int j = 0; j < entries; ++j) mine += entry[2 * j] == l;
        }
        // Rows are packed in (source, token, entry) order: an exclusive scan over lanes.
        int before = mine;
        for (int d = 1; d < kWarpSize; d *= 2) {
          const int v = __shfl_up_sync(0xffffffffu, before, d);
          if (lane >= d) before += v;
        }
        before -= mine;
        const int total = __shfl_sync(0xffffffffu, before + mine, kWarpSize - 1);
        if (t < count) {
          const size_t msg = static_cast<size_t>(s) * g.max_tokens + t;
          if (l == 0) c.handle.msg_entries[msg] = entries;
          const int32_t* entry = reinterpret_cast<const int32_t*>(message + sizeof(MessageHeader));
          int k = 0;
          for (int j = 0; j < entries; ++j) {
            if (entry[2 * j] != l) continue;
            const int row = rows + before + k++;
            // Only duplicate ids can overfill an expert; never write past its rows.
            const bool fits = row < static_cast<int>(expert_rows);
            if (!fits) report_failure(c.error, EPC_ERR_INVALID_ARGUMENT, kPhaseRouting, c.dev_comm.rank, s, 0);
            c.handle.msg_rows[msg * g.max_entries + j] = fits ? l * static_cast<int>(expert_rows) + row : -1;
            c.handle.msg_weights[msg * g.max_entries + j] = reinterpret_cast<const float*>(entry)[2 * j + 1];
          }
        }
        // Copy the payloads: the whole warp moves one row at a time.
        unsigned pending = __ballot_sync(0xffffffffu, mine > 0);
        while (pending != 0) {
          const int src_lane = __ffs(pending) - 1;
          pending &= pending - 1;
          const int src_mine = __shfl_sync(0xffffffffu, mine, src_lane);
          const int src_before = __shfl_sync(0xffffffffu, before, src_lane);
          const char* src = slots + (static_cast<size_t>(s) * g.max_tokens + t0 + src_lane) * g.message_bytes + g.header_bytes;
          for (int k = 0; k < src_mine; ++k) {
            if (rows + src_before + k >= static_cast<int>(expert_rows)) break;
            char* dst = static_cast<char*>(p.out_x) +
                        (static_cast<size_t>(l) * expert_rows + rows + src_before + k) * g.row_bytes;
            warp_copy_row(dst, src, g.row_bytes);
          }
        }
        rows += total;
      }
    }
    if (lane == 0) p.out_counts[l] = rows < static_cast<int>(expert_rows) ? rows : static_cast<int>(expert_rows);
  }

  if (last_block_to_finish(&c.state->dispatch_recv_done)) {
    c.state->dispatch_step = step + 1;
  }
}

}  // namespace

cudaError_t launch_ll_dispatch_send(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  ll_dispatch_send_kernel<<<blocks, kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

cudaError_t launch_ll_dispatch_recv(const LlDispatchParams& params, int blocks, cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(params.common.geo.nranks) * sizeof(uint32_t);
  ll_dispatch_recv_kernel<<<blocks, kThreads, shared, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace epc::kernels
