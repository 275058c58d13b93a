// Low-latency combine. Send: one warp per token this rank received in the last dispatch
// sums, in fp32 and in the token's top-k order, weight x expert output over this rank's
// entries of the token, rounds the partial to bf16 and stores it into the token's home rank
// at [this rank][token]; the last block then signals every rank. Receive: waits for every
// rank, then one warp per token adds the partials of the ranks hosting its entries in
// ascending rank order (fp32) and writes bf16. This is the reference model's ll_combine
// with CombineOrder::kPerRankPrereduce.
#include "kernels/device/bf16.cuh"
#include "kernels/device/launch_done.cuh"
#include "kernels/device/peer_wait.cuh"
#include "kernels/device/step_signal.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/launch.hpp"

namespace epc::kernels {

namespace {

constexpr int kThreads = 512;
constexpr int kChannelsPerVector = 8;  // 16 bytes of bf16

union Vector {
  int4 raw;
  uint16_t bf16[kChannelsPerVector];
};

__global__ void __launch_bounds__(kThreads) ll_combine_send_kernel(LlCombineParams p) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  const uint64_t step = c.state->combine_step;
  const int slot = static_cast<int>(step & 1);
  const int vectors = g.hidden / kChannelsPerVector;
  const int messages = g.nranks * g.max_tokens;

  for (int msg = global_warp(); msg < messages; msg += total_warps()) {
    const int source = msg / g.max_tokens;
    const int token = msg % g.max_tokens;
    if (token >= c.handle.recv_tokens[source]) continue;
    const int entries = c.handle.msg_entries[msg];
    if (entries == 0) continue;
    const size_t offset = p.recv_offset[slot] +
                          (static_cast<size_t>(g.rank) * g.max_tokens + token) * g.row_bytes;
    auto* dst = static_cast<int4*>(ncclGetPeerPointer(c.window, offset, source));
    for (int v = lane_id(); v < vectors; v += kWarpSize) {
      float acc[kChannelsPerVector] = {};
      for (int j = 0; j < entries; ++j) {
        const int flat_row = c.handle.msg_rows[static_cast<size_t>(msg) * g.max_entries + j];
        if (flat_row < 0) continue;  // an entry dispatch could not place (reported there)
        const float w = c.handle.msg_weights[static_cast<size_t>(msg) * g.max_entries + j];
        Vector y;
        y.raw = reinterpret_cast<const int4*>(p.expert_out + static_cast<size_t>(flat_row) * g.hidden)[v];
        for (int e = 0; e < kChannelsPerVector; ++e) acc[e] = add_rounded_product(acc[e], w, bf16_bits_to_float(y.bf16[e]));
      }
      Vector out;
      for (int e = 0; e < kChannelsPerVector; ++e) out.bf16[e] = float_to_bf16_bits(acc[e]);
      dst[v] = out.raw;
    }
  }

  if (last_block_to_finish(&c.state->combine_send_done)) {
    signal_every_peer(c.window, p.signal_offset[slot], g.nranks, g.rank, step, 0);
  }
}

__global__ void __launch_bounds__(kThreads) ll_combine_recv_kernel(LlCombineParams p) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  const uint64_t step = c.state->combine_step;
  const int slot = static_cast<int>(step & 1);
  const int lane = lane_id();
  const int vectors = g.hidden / kChannelsPerVector;

  auto* signals = static_cast<uint64_t*>(ncclGetLocalPointer(c.window, p.signal_offset[slot]));
  if (!wait_for_peers(signals, g.nranks, step_epoch(step), nullptr, c.timeout_ns, c.error,
                      kPhaseCombineReceive, c.dev_comm.rank)) {
    return;
  }
  const char* partials = static_cast<const char*>(ncclGetLocalPointer(c.window, p.recv_offset[slot]));

  for (int t = global_warp(); t < c.num_tokens; t += total_warps()) {
    const int expert = lane < c.topk ? c.handle.topk_idx[t * c.topk + lane] : -1;
    const int rank_of_lane = expert >= 0 ? expert / g.local_experts : -1;
    auto* out = reinterpret_cast<int4*>(p.out + static_cast<size_t>(t) * g.hidden);
    // Ranks hosting the token's entries, ascending: decided by the whole warp, then each
    // lane adds those ranks' partials for its vectors.
    for (int v0 = 0; v0 < vectors; v0 += kWarpSize) {
      const int v = v0 + lane;
      float acc[kChannelsPerVector] = {};
      for (int d = 0; d < g.nranks; ++d) {
        if (__ballot_sync(0xffffffffu, rank_of_lane == d) == 0) continue;
        if (v >= vectors) continue;
        Vector part;
        part.raw = reinterpret_cast<const int4*>(
            partials + (static_cast<size_t>(d) * g.max_tokens + t) * g.row_bytes)[v];
        for (int e = 0; e < kChannelsPerVector; ++e) acc[e] = __fadd_rn(acc[e], bf16_bits_to_float(part.bf16[e]));
      }
      if (v < vectors) {
        Vector result;
        for (int e = 0; e < kChannelsPerVector; ++e) result.bf16[e] = float_to_bf16_bits(acc[e]);
        out[v] = result.raw;
      }
    }
  }

  if (last_block_to_finish(&c.state->combine_recv_done)) {
    c.state->combine_step = step + 1;
  }
}

}  // namespace

cudaError_t launch_ll_combine_send(const LlCombineParams& params, int blocks, cudaStream_t stream) {
  ll_combine_send_kernel<<<blocks, kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

cudaError_t launch_ll_combine_recv(const LlCombineParams& params, int blocks, cudaStream_t stream) {
  ll_combine_recv_kernel<<<blocks, kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace epc::kernels
