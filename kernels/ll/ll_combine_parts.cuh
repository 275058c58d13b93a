// SPDX-License-Identifier: Apache-2.0
// Low-latency combine. Send: one block per message this rank received in the last dispatch sums, in
// fp32 and in the token's top-k order, weight x expert output over this rank's entries of the
// token, rounds the partial to bf16 and stores it into the token's home rank at record [this
// rank][the message's index] (ll_message_index.cuh; LlGeometry::partial_offset: the record's
// first row, entry row 0 on groups with
// EPC_GROUP_COMBINE_PER_ENTRY, so that it lies in what the staging map stages across nodes); the
// last block then signals every rank that takes records. On a one-node group a rank with at
// most LlGeometry::line_tokens tokens in the step takes its partials back as line records
// instead (takes_lines; line_words.cuh: every 4 bytes beside the step's epoch), which it sees
// arrive without a signal. Receive: waits for every rank's signal, or with line records
// (kLines) for none, then one block per (token, slice of its row) adds the partials of the
// ranks hosting its entries in ascending rank order (fp32), polling each line record until it
// carries the step, and writes bf16. This is the reference model's ll_combine with
// CombineOrder::kPerRankPrereduce. In the token layouts a message has one row, which the caller
// weighted (EPC_WEIGHTING_NONE): it crosses unchanged, and the receive is the same, the reference's
// ll_combine_tokens. With EPC_WEIGHTING_HOME (kHome, a template argument so that the SENDER launch
// carries none of its code) every entry's row returns instead and the token's rank weights them
// (ll_combine_home.cuh). A fused launch sends its own rank nothing: its receiving part sums its own
// rank's entries where they are, as the sending part would have, or with EPC_WEIGHTING_HOME reads
// their rows there (ll_step_kernel.cuh). A launch alone in its group has only its own entries:
// its receiving part is the one sum of each token's rows (sum_alone_entries).
#pragma once

#include "kernels/device/bf16.cuh"
#include "kernels/device/launch_done.cuh"
#include "kernels/device/line_await.cuh"
#ifdef EPC_PHASE_TRACE
#include "kernels/device/phase_stamp.cuh"
#endif
#include "kernels/device/step_signal.cuh"
#include "kernels/device/step_wait.cuh"
#include "kernels/device/sum_store.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/ll/ll_combine_home.cuh"
#include "kernels/ll/ll_message_index.cuh"
#include "kernels/ll/ll_received.cuh"
#include "kernels/ll/ll_slot_credit.cuh"
#include "kernels/transport/peer_transport.cuh"
#include "kernels/wire/ll_params.hpp"

namespace epc::kernels::combine {

constexpr int kChannelsPerVector = kHalfChannelsPerVector;  // of a bf16 row
constexpr int kRowsInFlight = 8;                            // expert rows a thread loads before adding them
constexpr int kRanksInFlight = 4;                           // partials a thread loads before adding them

union Vector {
  int4 raw;
  uint16_t bf16[kChannelsPerVector];
};

// The entries of one received message, read by its first warp into shared memory.
struct MessageEntries {
  int slot;  // source * max_tokens + index
  int entries;
  int flat_row[kWarpSize];  // -1 for an entry dispatch could not place (reported there)
  float weight[kWarpSize];
};

// Vector v of one message's partial: the sum over its entries (top-k order) of weight x row,
// with up to kRowsInFlight rows loaded before they are added, rounded to bf16; in the token
// layouts the message's one row, as the caller weighted it.
__device__ __forceinline__ Vector partial_vector(const LlCommon& c, const LlCombineParams& p, const MessageEntries& m,
                                                 int v) {
  Vector out;
  if (c.layout != LlLayout::kExpertPadded) {
    out.raw = reinterpret_cast<const int4*>(p.expert_out + static_cast<size_t>(m.flat_row[0]) * c.geo.hidden)[v];
    return out;
  }
  float acc[kChannelsPerVector] = {};
  for (int j0 = 0; j0 < m.entries; j0 += kRowsInFlight) {
    Vector y[kRowsInFlight];
    for (int k = 0; k < kRowsInFlight && j0 + k < m.entries; ++k) {
      const int row = m.flat_row[j0 + k];
      if (row >= 0) y[k].raw = reinterpret_cast<const int4*>(p.expert_out + static_cast<size_t>(row) * c.geo.hidden)[v];
    }
    for (int k = 0; k < kRowsInFlight && j0 + k < m.entries; ++k) {
      if (m.flat_row[j0 + k] < 0) continue;
      const float w = m.weight[j0 + k];
      for (int e = 0; e < kChannelsPerVector; ++e)
        acc[e] = add_rounded_product(acc[e], w, bf16_bits_to_float(y[k].bf16[e]));
    }
  }
  for (int e = 0; e < kChannelsPerVector; ++e) out.bf16[e] = float_to_bf16_bits(acc[e]);
  return out;
}

// Pre-reduces a slice of one message with the whole block: store(v, vector v of the partial).
template <typename Store>
__device__ __forceinline__ void send_partial(const LlCommon& c, const LlCombineParams& p, const MessageEntries& m,
                                             VectorSlice part, Store store) {
  for (int v = part.begin + threadIdx.x; v < part.end; v += blockDim.x) store(v, partial_vector(c, p, m, v).raw);
}

// The most tokens a rank may have in the step to take its partials back as line records: the
// group's count on a one-node group (on others the plan gives none; the constant one_node of
// a one-node launch folds the test away), none with EPC_WEIGHTING_HOME, whose rows are not
// partials. ll_combine.cu's host rule tests the same.
template <bool kHome>
__device__ __forceinline__ int line_tokens(const LlCommon& c) {
  return !kHome && c.transport.one_node ? c.geo.line_tokens : 0;
}

// Whether a home rank takes its partials back as line records: when it had at most `lines`
// tokens in the step, which the home knows and its dispatch signal told every rank
// (ll_dispatch_payload), so that both sides decide alike and the home's host can launch the
// receiving part that reads only line records (kLines; ll_combine.cu). Every partial to it is
// then a line record, and it waits for no signal.
__host__ __device__ __forceinline__ bool takes_lines(int home_tokens, int lines) {
  return lines > 0 && home_tokens <= lines;
}

// Rows a lane of sum_alone_entries has in flight, one vector of each; a warp's range of a
// slice is whole warps of vectors, so that few warps share a small slice (every warp that has
// a range issues the whole sum).
constexpr int kAloneTermsInFlight = 8;
constexpr int kAloneVectorsInFlight = 1;

// A launch alone in its group (ll_step_kernel.cuh), where every entry of token t is this
// rank's own: its output over the slice `part` of the row, each warp of the block a range of
// it, from the rows the dispatch recorded for its own message of t (number t). SENDER: the
// partial, weighted by the dispatch's weights and rounded to bf16 as a partial is, is the
// output (in the token layouts the message's one row, which the caller weighted: a term of
// weight 1); kHome: the top-k slots weighted by home_weights, as sum_home_entries sums them.
// Each warp reads the records itself: no block barrier, and no code for other ranks.
template <bool kHome>
__device__ __forceinline__ void sum_alone_entries(const LlCombineParams& p, int t, VectorSlice part, void* out) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  constexpr int kGranule = kAloneVectorsInFlight * kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  const int span = part.end - part.begin;
  const int per_warp = ((span + warps - 1) / warps + kGranule - 1) / kGranule * kGranule;
  const int begin = part.begin + (threadIdx.x / kWarpSize) * per_warp;
  if (begin >= part.end) return;  // uniform over the warp
  const int count = part.end - begin < per_warp ? part.end - begin : per_warp;
  const int lane = lane_id();
  const size_t n = static_cast<size_t>(own_message_number(c, t));
  // Lane j: the row of the message's entry j (entries in top-k order).
  const int entry_row = lane < g.max_entries ? c.handle.msg_rows[n * g.max_entries + lane] : -1;
  int terms, row;
  float weight = 1.0f;
  if constexpr (kHome) {
    // Lane k: top-k slot k, whose entry is the one of its slot among the unmasked ones.
    terms = c.topk;
    const int expert = lane < c.topk ? c.handle.topk_idx[t * c.topk + lane] : -1;
    if (lane < c.topk) weight = __ldg(p.home_weights + static_cast<size_t>(t) * c.topk + lane);
    const unsigned unmasked = __ballot_sync(0xffffffffu, expert >= 0);
    row = __shfl_sync(0xffffffffu, entry_row, __popc(unmasked & ((1u << lane) - 1u)));
    if (expert < 0) row = -1;
  } else {
    const bool by_token = c.layout != LlLayout::kExpertPadded;
    const int entries = c.handle.msg_entries[n];
    terms = by_token && entries > 1 ? 1 : entries;
    row = lane < terms ? entry_row : -1;
    if (!by_token && lane < g.max_entries) weight = c.handle.msg_weights[n * g.max_entries + lane];
  }
  const int4* src =
      row >= 0 ? reinterpret_cast<const int4*>(p.expert_out + static_cast<size_t>(row) * g.hidden) + begin : nullptr;
  auto term = [&](int) { return src; };
  auto weight_of = [&](int) { return weight; };
  using Weights = TermWeights<decltype(weight_of)>;
  void* out_part =
      static_cast<char*>(out) + static_cast<size_t>(begin) * kChannelsPerVector * sum_output_bytes(p.out_type);
  warp_sum_bf16_rows<decltype(term), NoComputedTerm, Weights, kAloneTermsInFlight, kAloneVectorsInFlight>(
      terms, term, count, out_part, p.out_type, NoComputedTerm{}, Weights{weight_of}, /*round_bf16=*/!kHome);
}

// One received message's records (the dispatch wrote one for every message it received, at
// its number), one lane's share: loaded into registers a message ahead of their use, and
// published into shared memory when their turn comes.
struct MessageRecords {
  int slot, entries;  // lane 0
  int flat_row;       // lanes < max_entries; slots past the count are not used
  float weight;
};

// Called by every thread; only the first warp loads.
__device__ __forceinline__ MessageRecords fetch_records(const LlCommon& c, int n) {
  MessageRecords r{0, 0, -1, 0.0f};
  if (threadIdx.x >= kWarpSize) return r;
  const int lane = lane_id();
  if (lane == 0) {
    r.slot = c.handle.msg_slot[n];
    r.entries = c.handle.msg_entries[n];
  }
  if (lane < c.geo.max_entries) {
    r.flat_row = c.handle.msg_rows[static_cast<size_t>(n) * c.geo.max_entries + lane];
    r.weight = c.handle.msg_weights[static_cast<size_t>(n) * c.geo.max_entries + lane];
  }
  return r;
}

__device__ __forceinline__ void publish_records(const LlCommon& c, const MessageRecords& r, MessageEntries* entries) {
  if (threadIdx.x >= kWarpSize) return;
  const int lane = lane_id();
  if (lane == 0) {
    entries->slot = r.slot;
    entries->entries = r.entries;
  }
  if (lane < c.geo.max_entries) {
    entries->flat_row[lane] = r.flat_row;
    entries->weight[lane] = r.weight;
  }
}

// Whether a combine launch's rank sends itself nothing (a fused launch: its receiving part
// sums its own entries, or with EPC_WEIGHTING_HOME reads its own entries' rows, in place).
template <bool kFused>
constexpr bool kCombineOwnInPlace = kFused;

// What the sending part loads before the step's slot is claimed (ll_step_kernel.cuh): the
// block's first message's records and this thread's rank's count of the dispatch's tokens
// (the previous dispatch wrote them), so that their latency overlaps the load of the slot's
// state.
struct EarlyLoads {
  MessageRecords first;
  uint32_t tokens_from;  // rank threadIdx.x's, when it is one
  // The receiving part's first token's expert in top-k slot lane (first warp; -1 past K or
  // without a token), so that a fused launch's receive finds the token's ranks without a
  // load after its sending part.
  int receive_expert;
  // And, when it sums its own entries in place, the records of its own message of that token.
  MessageRecords receive_own;
};

// A receive_expert that was not loaded (a receive-only launch loads nothing early).
constexpr int kNotLoaded = -2;

// Lane j's expert of token t (-1 past K), loaded by the first warp.
__device__ __forceinline__ int token_expert(const LlCommon& c, int t) {
  const int j = static_cast<int>(threadIdx.x);
  return j < c.topk ? c.handle.topk_idx[t * c.topk + j] : -1;
}

template <bool kOwnInPlace>
__device__ __forceinline__ EarlyLoads early_loads(const LlCombineParams& p) {
  const LlCommon& c = p.common;
  EarlyLoads e{};
  const int message = sliced_row(static_cast<int>(blockIdx.x), p.message_slices);
  if (message < c.geo.nranks * c.geo.max_tokens) e.first = fetch_records(c, message);
  if (static_cast<int>(threadIdx.x) < c.geo.nranks)
    e.tokens_from = static_cast<uint32_t>(c.handle.recv_tokens[threadIdx.x]);
  e.receive_expert = -1;
  const int token = sliced_row(static_cast<int>(blockIdx.x), p.token_slices);
  if (threadIdx.x < kWarpSize && token < c.num_tokens) {
    e.receive_expert = token_expert(c, token);
    if (kOwnInPlace) e.receive_own = fetch_records(c, own_message_number(c, token));
  }
  return e;
}

// The whole part, run by every thread of every block; true in the launch's last block, which
// has signalled every rank (ll_step_kernel.cuh records the step).
template <bool kHome, bool kFused>
__device__ __forceinline__ bool send(const LlCombineParams& p, uint64_t step, const EarlyLoads& early) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  const int skipped = kCombineOwnInPlace<kFused> ? g.rank : -1;  // the rank sent no partial or rows
  const int lines = line_tokens<kHome>(c);
  // [2 * nranks], as the last dispatch received: the messages from each rank, then its tokens.
  extern __shared__ uint32_t tokens_from[];
#ifdef EPC_PHASE_TRACE
  if (blockIdx.x == 0 && threadIdx.x == 0) stamp_phase(c.phase_trace->combine, step, kLlPhaseStart);
#endif
  __shared__ MessageEntries entries;
  const int slices = p.message_slices;
  const int first = static_cast<int>(blockIdx.x);
  MessageRecords next = early.first;
  for (int s = threadIdx.x; s < 2 * g.nranks; s += blockDim.x) {
    tokens_from[s] = s == static_cast<int>(threadIdx.x) && s < g.nranks
                         ? early.tokens_from
                         : static_cast<uint32_t>(c.handle.recv_tokens[s]);
  }
  const auto home_takes_lines = [&](int home) {
    return takes_lines(home == g.rank ? c.num_tokens : static_cast<int>(tokens_from[g.nranks + home]), lines);
  };

  const int vectors = g.hidden / kChannelsPerVector;
  __syncthreads();
  const int messages = received_messages(tokens_from, g.nranks);
  // One block per (message, slice of its row).
  for (int item = first; item < messages * slices; item += gridDim.x) {
    publish_records(c, next, &entries);
    __syncthreads();
    if (item + static_cast<int>(gridDim.x) < messages * slices)
      next = fetch_records(c, sliced_row(item + static_cast<int>(gridDim.x), slices));
    const int source = g.source_of_slot(entries.slot);
    const ReceivedMessage m{source, entries.slot - source * g.max_tokens, entries.slot, sliced_row(item, slices)};
    const VectorSlice part = vector_slice(vectors, slice_of(item, slices), slices);
    if (m.source == skipped) {
      // Summed in place by the receiving part.
    } else if constexpr (kHome) {
      send_entry_rows(p, m.source, m.in_source, entries.entries, entries.flat_row, part);
    } else {
      // A line record (on one node, where commit does nothing) or the message's record.
      const bool as_line = home_takes_lines(m.source);
      const uint64_t offset = as_line ? g.line_partial_offset(p.recv_offset, g.rank, m.in_source)
                                      : g.partial_offset(p.recv_offset, g.rank, m.in_source);
      int4* dst = static_cast<int4*>(c.transport.buffer(offset, m.source));
      const uint32_t epoch = step_epoch(step);
      if (entries.entries > 0) {
        send_partial(c, p, entries, part, [&](int v, int4 x) {
          if (as_line) {
            store_line_vector(dst + 2 * v, x, epoch);
          } else {
            dst[v] = x;
          }
        });
      }
      // The network's put reads what every thread stored; inside one node commit does nothing.
      if (!c.transport.one_node) __syncthreads();
      if (entries.entries > 0 && part.end > part.begin) {
        constexpr uint64_t kVectorBytes = 16;
        c.transport.commit(offset + part.begin * kVectorBytes, (part.end - part.begin) * kVectorBytes, m.source,
                           threadIdx.x, blockDim.x);
      }
    }
    // `entries` is rewritten for the block's next message, if it has one (the count after the
    // loop begins with a barrier of its own).
    if (item + static_cast<int>(gridDim.x) < messages * slices) __syncthreads();
  }
#ifdef EPC_PHASE_TRACE
  if (blockIdx.x == 0 && threadIdx.x == 0) stamp_phase(c.phase_trace->combine, step, kLlPhasePayloadSent);
#endif

  const bool last = last_block_to_finish(&c.state->combine.send_done, /*publish_system=*/!c.transport.one_node);
  if (last && threadIdx.x < kWarpSize) {
    // A rank that got only line records waits for no signal.
    const auto waits = [&](int home) { return !home_takes_lines(home); };
    warp_signal_every_peer(
        c.transport, p.signal_offset, g.nranks, g.rank, step_epoch(step), [](int) { return 0u; }, skipped, waits);
#ifdef EPC_PHASE_TRACE
    if (threadIdx.x == 0) stamp_phase(c.phase_trace->combine, step, kLlPhaseSignalsSent);
#endif
  } else if (last && threadIdx.x < 2 * kWarpSize) {
    warp_give_owed_late(c, &c.state->combine, p.slot);
  }
  return last;
}

// The ranks hosting the unmasked entries of token t, whose expert in top-k slot lane the
// first warp's lanes hold (`expert`, or kNotLoaded: loaded here), ascending, into shared
// `ranks`, and where each returned its partial (the token's message index there,
// ll_message_index.cuh) into shared `indexes`; returns their number in every thread.
__device__ __forceinline__ int token_ranks(const LlCommon& c, int t, int* ranks, int* indexes,
                                           int expert = kNotLoaded) {
  __shared__ int count;
  if (threadIdx.x < kWarpSize) {
    const int j = threadIdx.x;
    if (expert == kNotLoaded) expert = token_expert(c, t);
    const int rank = expert >= 0 ? c.geo.rank_of_expert(expert) : -1;
    const unsigned same = __match_any_sync(0xffffffffu, rank);
    const bool leader = rank >= 0 && (same & ((1u << j) - 1u)) == 0;
    const unsigned leaders = __ballot_sync(0xffffffffu, leader);
    int below = 0;  // distinct ranks smaller than this lane's: the leaders' (every lane
                    // walks the same leaders, so the shuffles see the whole warp)
#pragma unroll 1
    for (unsigned rest = leaders; rest != 0; rest &= rest - 1) {
      const int other = __shfl_sync(0xffffffffu, rank, __ffs(rest) - 1);
      below += other < rank;
    }
    if (leader) {
      ranks[below] = rank;
      indexes[below] = message_index(c, t, rank);
    }
    if (j == 0) count = __popc(leaders);
  }
  __syncthreads();
  return count;
}

// Vector v of the line record of the partial (rank, index) in the combine slot at `partials`.
__device__ __forceinline__ const int4* line_at(const char* partials, const LlGeometry& g, int rank, int index, int v) {
  return reinterpret_cast<const int4*>(partials + g.line_partial_offset(0, rank, index)) + 2 * v;
}

// Polls the line record vector at `at` until every word carries `epoch`, then stores its data
// in `*data` (bounded; a timeout names `peer`, the rank that sends it).
__device__ __forceinline__ bool await_line(const LlCommon& c, const int4* at, uint32_t epoch, int peer, int4* data) {
  return await_line_vector(at, epoch, LineWait{c.timeout_ns, c.error, kPhaseCombineReceive, c.dev_comm.rank, peer},
                           data);
}

// One item of the receive: the token's sum over the slice `part` of its row into `out`, from
// the partials of its `num_ranks` ranks (token_ranks) in `partials`, this rank's (`own`) summed
// in place from `own_entries` (`early_own` already holds vector `early_vector`'s). kLines: the
// others come as line records, polled until they carry `epoch`; `*lines_ok` turns false when
// one did not come (then the group has failed and no more are awaited).
template <bool kLines>
__device__ __forceinline__ void sum_token_slice(const LlCombineParams& p, const char* partials, const int* ranks,
                                                const int* indexes, int num_ranks, int own,
                                                const MessageEntries& own_entries, int early_vector,
                                                const Vector& early_own, VectorSlice part, void* out, uint32_t epoch,
                                                bool* lines_ok) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  for (int v = part.begin + threadIdx.x; v < part.end; v += blockDim.x) {
    float acc[kChannelsPerVector] = {};
    // This rank's partial, as its sending part would have sent it (the token has an entry
    // here exactly when this rank is among its ranks, and then its message has one).
    // The first item's first vector has it already; any other sums it once the peers'
    // partials of its group of ranks are loading.
    for (int r0 = 0; r0 < num_ranks; r0 += kRanksInFlight) {
      Vector part[kRanksInFlight];
      unsigned late = 0;  // bit k: part k is a line record's that had not come when loaded
      int own_at = -1;
      for (int k = 0; k < kRanksInFlight; ++k) {
        if (r0 + k >= num_ranks) break;
        const int rank = ranks[r0 + k], index = indexes[r0 + k];
        if (rank == own) {
          own_at = k;
        } else if (kLines) {
          // Only the data stays live: a line that has not come is loaded again below.
          const LineVector line = load_line_vector(line_at(partials, g, rank, index, v));
          part[k].raw = line_data(line);
          if (!line_arrived(line, epoch)) late |= 1u << k;
        } else {
          part[k].raw = reinterpret_cast<const int4*>(partials + g.partial_offset(0, rank, index))[v];
        }
      }
      if (kLines) {
#pragma unroll
        for (int k = 0; k < kRanksInFlight; ++k) {
          if ((late >> k & 1u) != 0 && *lines_ok) {
            *lines_ok = await_line(c, line_at(partials, g, ranks[r0 + k], indexes[r0 + k], v), epoch, ranks[r0 + k],
                                   &part[k].raw);
          }
        }
      }
      Vector own_part;
      own_part.raw = make_int4(0, 0, 0, 0);
      if (own_at >= 0) own_part = v == early_vector ? early_own : partial_vector(c, p, own_entries, v);
      for (int k = 0; k < kRanksInFlight && r0 + k < num_ranks; ++k) {
        const Vector term = k == own_at ? own_part : part[k];
        for (int e = 0; e < kChannelsPerVector; ++e) acc[e] = __fadd_rn(acc[e], bf16_bits_to_float(term.bf16[e]));
      }
    }
    store_sum_vector(out, v, acc, p.out_type);
  }
}

// The whole part, run by every thread of every block; false when the block's wait failed
// (ll_step_kernel.cuh gives the slot's credits). `early`: what a fused launch loaded early
// (a receive-only launch loads nothing early). kLines: this rank takes its partials back as
// line records in this step (takes_lines; never with kHome).
template <bool kHome, bool kFused, bool kAlone, bool kLines>
__device__ __forceinline__ bool receive(const LlCombineParams& p, uint64_t step, const EarlyLoads& early) {
  const LlCommon& c = p.common;
  const LlGeometry& g = c.geo;
  const int vectors = g.hidden / kChannelsPerVector;
  if constexpr (kAlone) {
    // Nothing to wait for: every entry is this rank's own.
    for (int item = blockIdx.x; item < c.num_tokens * p.token_slices; item += gridDim.x) {
      const int t = sliced_row(item, p.token_slices);
      sum_alone_entries<kHome>(
          p, t, vector_slice(vectors, slice_of(item, p.token_slices), p.token_slices),
          static_cast<char*>(p.out) + static_cast<size_t>(t) * g.hidden * sum_output_bytes(p.out_type));
    }
    return true;
  }
  __shared__ int ranks[kWarpSize], indexes[kWarpSize];
  // This rank's own entries of the block's token, summed in place (kCombineOwnInPlace; with
  // kHome, sum_home_entries finds them itself).
  constexpr bool in_place = kCombineOwnInPlace<kFused>;
  const int own = in_place ? g.rank : -1;
  __shared__ MessageEntries own_entries;
  // Called by every thread before token_ranks, whose barrier publishes them.
  const auto load_own_entries = [&](int t) {
    if (in_place && !kHome && threadIdx.x < kWarpSize)
      publish_records(c, fetch_records(c, own_message_number(c, t)), &own_entries);
  };

  // One block per (token, slice of its row). The first token's ranks (and own entries)
  // depend on the routing only: found while the peers still send.
  const int slices = p.token_slices;
  const int items = c.num_tokens * slices;
  int num_ranks = 0;
  // This thread's first vector of the first item, and this rank's partial of it: its rows are
  // the caller's, so it is summed while the peers still send, not after the wait.
  const VectorSlice first = vector_slice(vectors, slice_of(static_cast<int>(blockIdx.x), slices), slices);
  const int first_vector = static_cast<int>(blockIdx.x) < items ? first.begin + static_cast<int>(threadIdx.x) : -1;
  Vector early_own;
  early_own.raw = make_int4(0, 0, 0, 0);
  if (!kHome && static_cast<int>(blockIdx.x) < items) {
    if (in_place) publish_records(c, early.receive_own, &own_entries);
    num_ranks = token_ranks(c, sliced_row(static_cast<int>(blockIdx.x), slices), ranks, indexes,
                            kFused ? early.receive_expert : kNotLoaded);
    if (in_place && own_entries.entries > 0 && first_vector < first.end)
      early_own = partial_vector(c, p, own_entries, first_vector);
  }
  // Line records carry their own arrival: no rank signals a rank that takes them.
  if (!kLines && !wait_for_step(c.transport, p.signal_offset, g.nranks, step_epoch(step), nullptr, nullptr,
                                c.timeout_ns, c.error, kPhaseCombineReceive, c.dev_comm.rank, SkippedPeer{own, 0})) {
    return false;
  }
#ifdef EPC_PHASE_TRACE
  if (blockIdx.x == 0 && threadIdx.x == 0) stamp_phase(c.phase_trace->combine, step, kLlPhaseWaitDone);
#endif
  const char* partials = static_cast<const char*>(c.transport.local(p.recv_offset));
  bool lines_ok = true;  // every line record this thread awaited came
  const uint32_t epoch = step_epoch(step);
  if constexpr (kHome) {
    for (int t = blockIdx.x; t < c.num_tokens; t += gridDim.x) {
      sum_home_entries(p, partials, t,
                       static_cast<char*>(p.out) + static_cast<size_t>(t) * g.hidden * sum_output_bytes(p.out_type),
                       own);
    }
  } else {
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      const int t = sliced_row(item, slices);
      if (item != static_cast<int>(blockIdx.x)) {
        load_own_entries(t);
        num_ranks = token_ranks(c, t, ranks, indexes);
      }
      void* out = static_cast<char*>(p.out) + static_cast<size_t>(t) * g.hidden * sum_output_bytes(p.out_type);
      const VectorSlice part = vector_slice(vectors, slice_of(item, slices), slices);
      const int early_vector = item == static_cast<int>(blockIdx.x) ? first_vector : -1;
      sum_token_slice<kLines>(p, partials, ranks, indexes, num_ranks, own, own_entries, early_vector, early_own, part,
                              out, epoch, &lines_ok);
      // `ranks`, `indexes` and `own_entries` are rewritten for the next token
      if (item + static_cast<int>(gridDim.x) < items) __syncthreads();
    }
  }
  // A block's outcome is every thread's (finish_step counts whole blocks).
  return !kLines || __syncthreads_and(lines_ok);
}

}  // namespace epc::kernels::combine
