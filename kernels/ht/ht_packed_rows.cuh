// SPDX-License-Identifier: Apache-2.0
// The EXPERT_PACKED layout's device parts, shared by dispatch's senders (rows this rank
// sends itself) and receivers (rows from peers' slots), and by combine's senders and
// receivers: a token's rows go to one row per local entry, in zones of each local expert;
// combine sums those rows of a token back into one bf16 partial per (token, rank), or
// (EPC_WEIGHTING_HOME) returns each of them to its own per-entry slot.
#pragma once

#include <cstdint>

#include "kernels/device/bf16.cuh"
#include "kernels/device/l2_prefetch.cuh"
#include "kernels/device/row_copy.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/ht/ht_packed_zones.cuh"
#include "kernels/wire/ht_params.hpp"
#include "kernels/wire/limits.hpp"

namespace epc::kernels {

// Index of entry k of the token in slot [source][j] in the handle's entry arrays.
__device__ __forceinline__ size_t packed_entry_index(const HtGeometry& g, int source, int j, int k) {
  return (static_cast<size_t>(source) * g.max_tokens + j) * g.topk + k;
}

// The row of the entry at place q among source's entries for this rank (ht_message.hpp):
// its local expert l is the last whose entries start at or before q. `known_l`: l where the
// caller knows it, a token this rank sends itself (source is this rank), whose row is then its
// place plus the expert's shift (packed_own_shifts; the block ran load_packed_own_shifts);
// -1: searched.
__device__ __forceinline__ int packed_row_of(const HtCommon& c, int source, int q, int known_l = -1) {
  const int L = c.geo.local_experts;
  const int32_t* starts = c.handle.source_starts + static_cast<size_t>(source) * (L + 1);
  if (known_l >= 0) {
    if (packed_own_shifts_fit(c.geo)) return packed_own_shifts()[known_l] + q;
    return c.handle.expert_base[source * L + known_l] + q - starts[known_l];
  }
  int lo = 0, hi = L - 1;  // starts[lo] <= q < starts[hi + 1]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (starts[mid] <= q) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return c.handle.expert_base[source * L + lo] + q - starts[lo];
}

// Copies one token's payload (`src`, and its scale bytes where p.scale_bytes > 0) into the row of each of
// its local entries. Lane k < K holds entry k: `q` its place among the source's entries for
// this rank (-1: not on this rank), `weight`, and `l` its local expert where known (else -1).
// Records each entry's row and weight for combine. Every lane must call.
template <RowLoad kLoad>
__device__ __forceinline__ void write_packed_rows(const HtDispatchParams& p, const int4* src, const char* src_scales,
                                                  int q, float weight, int source, int j, int l = -1) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int k = lane_id();
  const int row = k < g.topk && q >= 0 ? packed_row_of(c, source, q, l) : -1;
  if (k < g.topk) {
    const size_t at = packed_entry_index(g, source, j, k);
    c.handle.entry_rows[at] = row;
    c.handle.entry_weights[at] = row >= 0 ? weight : 0.0f;
    if (row >= 0 && p.out_topk_weights != nullptr) p.out_topk_weights[row] = weight;
  }
  const unsigned rows = __ballot_sync(0xffffffffu, row >= 0);
  if (rows == 0) return;
  int4* dst = row >= 0 ? reinterpret_cast<int4*>(static_cast<char*>(p.out_x) + static_cast<size_t>(row) * p.row_bytes)
                       : nullptr;
  warp_copy_row_to_lanes<kLoad>(src, p.row_bytes / 16, rows, dst);
  if (p.scale_bytes == 0) return;
  for (unsigned rest = rows; rest != 0; rest &= rest - 1) {
    const int to = __shfl_sync(0xffffffffu, row, __ffs(rest) - 1);
    warp_copy_scales<kLoad>(static_cast<char*>(p.out_scales) + static_cast<size_t>(to) * p.scale_bytes, src_scales,
                            p.scale_bytes);
  }
}

// EPC_HANDLE_ZERO_PADDING: every thread of the grid zeroes a share of the rows between each
// zone's entries and its end (payload, scales, out_topk_weights). Disjoint from every row
// dispatch writes, so it needs no ordering with them.
__device__ __forceinline__ void zero_packed_padding(const HtDispatchParams& p) {
  const HtCommon& c = p.common;
  const HtGeometry& g = c.geo;
  const int thread = blockIdx.x * blockDim.x + threadIdx.x, threads = gridDim.x * blockDim.x;
  const int scale_bytes = p.scale_bytes;
  for (int l = 0; l < g.local_experts; ++l) {
    const int first = c.handle.expert_offsets[l] + c.handle.expert_counts[l], end = c.handle.expert_offsets[l + 1];
    if (first >= end) continue;
    int4* rows = reinterpret_cast<int4*>(static_cast<char*>(p.out_x) + static_cast<size_t>(first) * p.row_bytes);
    const size_t vectors = static_cast<size_t>(end - first) * p.row_bytes / 16;
    for (size_t i = thread; i < vectors; i += threads) rows[i] = make_int4(0, 0, 0, 0);
    if (scale_bytes > 0) {
      unsigned char* scales = static_cast<unsigned char*>(p.out_scales) + static_cast<size_t>(first) * scale_bytes;
      for (size_t i = thread; i < static_cast<size_t>(end - first) * scale_bytes; i += threads) scales[i] = 0;
    }
    if (p.out_topk_weights != nullptr) {
      for (int r = first + thread; r < end; r += threads) p.out_topk_weights[r] = 0.0f;
    }
  }
}

// Rows of a token whose vector a lane loads before it adds any: their loads overlap instead of
// following one another (a token has up to K rows here, one per local entry).
constexpr int kPackedRowsInFlight = 4;
static_assert(kMaxTopk % kPackedRowsInFlight == 0, "a token's entries come in whole groups of rows in flight");
// How far ahead of the vector it loads a lane asks L2 for each row's line: more rows' loads in
// flight spill under the HT kernels' register cap, a prefetch holds no register.
constexpr int kPackedPrefetchVectors = 2 * kWarpSize;

// Combine: vector `i` (8 bf16 channels) of the partial of the token whose rows lanes hold
// (lane k < K: entry k's row, -1 where none, and its weight): the rows multiplied by their
// weights (or as given) and summed in fp32 in top-k order, rounded once to bf16. kPrefetch:
// also ask L2 for each row kPackedPrefetchVectors further on, for a caller that walks the
// rows vector by vector: combine's senders. The receivers' own partial, read through
// warp_sum_bf16_rows, measured slower with it (bench/results/ht_packed_prefetch_session27_2xh200.md).
template <bool kPrefetch = false>
__device__ __forceinline__ int4 packed_partial_vector(const HtCombineParams& p, int my_row, float my_weight, int i) {
  const HtGeometry& g = p.common.geo;
  const int vectors = g.hidden / kHalfChannelsPerVector;
  float acc[kHalfChannelsPerVector];
#pragma unroll
  for (int e = 0; e < kHalfChannelsPerVector; ++e) acc[e] = 0.0f;
  for (int k0 = 0; k0 < g.topk; k0 += kPackedRowsInFlight) {
    int row[kPackedRowsInFlight];
    float w[kPackedRowsInFlight];
    int4 raw[kPackedRowsInFlight];
#pragma unroll
    for (int q = 0; q < kPackedRowsInFlight; ++q) {
      const int k = k0 + q;  // < kMaxTopk = the warp's lanes
      row[q] = __shfl_sync(0xffffffffu, my_row, k);
      w[q] = p.weighted ? __shfl_sync(0xffffffffu, my_weight, k) : 1.0f;
      if (k >= g.topk) row[q] = -1;
      const int4* from = reinterpret_cast<const int4*>(p.x + static_cast<size_t>(row[q]) * g.hidden);
      raw[q] = row[q] >= 0 ? __ldg(from + i) : make_int4(0, 0, 0, 0);
      if (kPrefetch && row[q] >= 0 && i + kPackedPrefetchVectors < vectors)
        prefetch_l2(from + i + kPackedPrefetchVectors);
    }
#pragma unroll
    for (int q = 0; q < kPackedRowsInFlight; ++q) {
      if (row[q] < 0) continue;
      const uint16_t* bits = reinterpret_cast<const uint16_t*>(&raw[q]);
#pragma unroll
      for (int e = 0; e < kHalfChannelsPerVector; ++e)
        acc[e] = add_rounded_product(acc[e], w[q], bf16_bits_to_float(bits[e]));
    }
  }
  int4 out;
  uint16_t* bits = reinterpret_cast<uint16_t*>(&out);
#pragma unroll
  for (int e = 0; e < kHalfChannelsPerVector; ++e) bits[e] = float_to_bf16_bits(acc[e]);
  return out;
}

// One row's vector times `weight`: each product rounded to fp32, then to bf16, as a partial of
// that row alone is (packed_partial_vector).
__device__ __forceinline__ int4 weighted_bf16_vector(int4 raw, float weight) {
  const uint16_t* in = reinterpret_cast<const uint16_t*>(&raw);
  int4 out;
  uint16_t* bits = reinterpret_cast<uint16_t*>(&out);
#pragma unroll
  for (int e = 0; e < kHalfChannelsPerVector; ++e)
    bits[e] = float_to_bf16_bits(add_rounded_product(0.0f, weight, bf16_bits_to_float(in[e])));
  return out;
}

// A token's one row here (HtCombineParams::lone_rows) and its weight (1 unweighted): its
// partial is the row times the weight, each product rounded to fp32 and then to bf16, which
// leaves an unweighted row as it stands.
struct PackedLoneRow {
  const int4* row;  // nullptr: the token has no row here, or several
  float weight;

  // Vector i of the partial; the weighted form of packed_partial_vector's one-row sum.
  __device__ int4 weighted_vector(int i) const { return weighted_bf16_vector(__ldg(row + i), weight); }
};

// The token's lone row among the rows lanes hold (lane k < K: entry k's row, -1 where none,
// and its weight). Every lane must call.
__device__ __forceinline__ PackedLoneRow packed_lone_row(const HtCombineParams& p, int my_row, float my_weight) {
  const unsigned present = __ballot_sync(0xffffffffu, my_row >= 0);
  if (__popc(present) != 1) return PackedLoneRow{nullptr, 0.0f};
  const int lane = __ffs(present) - 1;
  const int only = __shfl_sync(0xffffffffu, my_row, lane);
  const float weight = p.weighted ? __shfl_sync(0xffffffffu, my_weight, lane) : 1.0f;
  return PackedLoneRow{reinterpret_cast<const int4*>(p.x + static_cast<size_t>(only) * p.common.geo.hidden), weight};
}

// A lone weighted row's partial as a computed term of warp_sum_bf16_rows (bf16_row_sum.cuh),
// standing as term number `term`: read from the row (row_of gives it) and finished into its
// rounded products with the weight.
struct LoneWeightedTerm {
  static constexpr bool kAny = true;
  static constexpr bool kFromRow = true;
  int term;
  float weight;
  __device__ int index() const { return term; }
  __device__ int4 vector(int) const { return make_int4(0, 0, 0, 0); }
  __device__ int4 finish(int4 raw) const { return weighted_bf16_vector(raw, weight); }
};

// Lane k's entry of the token in slot [source][j]: its row and weight.
__device__ __forceinline__ void packed_entry(const HtCommon& c, int source, int j, int* row, float* weight) {
  const int k = lane_id();
  *row = -1;
  *weight = 0.0f;
  if (k >= c.geo.topk) return;
  const size_t at = packed_entry_index(c.geo, source, j, k);
  *row = c.handle.entry_rows[at];
  *weight = c.handle.entry_weights[at];
}

// A term of warp_sum_bf16_rows (bf16_row_sum.cuh) that the warp computes instead of reading:
// the partial of the token in slot [source][j] of this rank (its rows here summed as
// combine's senders sum them for peers), standing as term number `term` (-1: none, when the
// token has no row here). Combine's receivers add it for their own tokens (source = this
// rank); across nodes, the reducers for the tokens of the rail source they reduce for.
struct PackedPartialTerm {
  static constexpr bool kAny = true;
  static constexpr bool kFromRow = false;
  const HtCombineParams& p;
  int term;
  int row;
  float weight;
  __device__ PackedPartialTerm(const HtCombineParams& params, int term_index, int source, int j)
      : p(params), term(term_index), row(-1), weight(0.0f) {
    if (term_index >= 0) packed_entry(p.common, source, j, &row, &weight);
  }
  __device__ int index() const { return term; }
  __device__ int4 vector(int i) const { return packed_partial_vector(p, row, weight, i); }
  // packed_lone_row of the token's rows here (none with no term). Every lane must call.
  __device__ PackedLoneRow lone_row() const {
    return term >= 0 ? packed_lone_row(p, row, weight) : PackedLoneRow{nullptr, 0.0f};
  }
};

// Combine's sender: the partial of the token in slot [source][j] into a peer's slot, with
// each entry's backward weight (the weight gradient of its row) where weights travel.
// kLone: a lone row (packed_lone_row) is copied as it stands, or weighted.
template <bool kLone>
__device__ __forceinline__ void write_packed_partial(const HtCombineParams& p, int source, int j, char* slot) {
  const HtGeometry& g = p.common.geo;
  int row;
  float weight;
  packed_entry(p.common, source, j, &row, &weight);
  int4* out = reinterpret_cast<int4*>(slot);
  const int vectors = g.hidden / kHalfChannelsPerVector;
  const PackedLoneRow lone = kLone ? packed_lone_row(p, row, weight) : PackedLoneRow{nullptr, 0.0f};
  if (lone.row != nullptr && !p.weighted) {
    warp_copy_row_segmented<RowLoad::kReadOnly>(out, lone.row, vectors);
  } else if (lone.row != nullptr) {
    for (int i = lane_id(); i < vectors; i += kWarpSize) out[i] = lone.weighted_vector(i);
  }
  // Every lane runs the same number of iterations: the partial shuffles across the warp.
  for (int base = 0; base < vectors && lone.row == nullptr; base += kWarpSize) {
    const int i = base + lane_id();
    const int4 v = packed_partial_vector<true>(p, row, weight, i < vectors ? i : 0);
    if (i < vectors) out[i] = v;
  }
  if (p.weights != nullptr && lane_id() < g.topk) {
    reinterpret_cast<float*>(slot + g.combine_slot.weights_offset)[lane_id()] =
        row >= 0 ? __ldg(p.weights + row) : 0.0f;
  }
}

// EPC_WEIGHTING_HOME, combine's sender: the rows of the entries of the token in slot
// [source][j], unweighted, each into its own per-entry slot (`slot(k)`: entry k's slot as
// buffer() gave it), with its backward weight (the first float of the slot's weights) where
// weights travel. Masked entries and those of other ranks write nothing.
template <typename SlotOf>
__device__ __forceinline__ void write_packed_entries(const HtCombineParams& p, int source, int j, SlotOf slot) {
  const HtGeometry& g = p.common.geo;
  int row;
  float weight;
  packed_entry(p.common, source, j, &row, &weight);
  const int vectors = g.hidden / kHalfChannelsPerVector;
  for (unsigned rest = __ballot_sync(0xffffffffu, row >= 0); rest != 0; rest &= rest - 1) {
    const int k = __ffs(rest) - 1;
    const int from = __shfl_sync(0xffffffffu, row, k);
    warp_copy_row_segmented<RowLoad::kReadOnly>(
        reinterpret_cast<int4*>(slot(k)), reinterpret_cast<const int4*>(p.x + static_cast<size_t>(from) * g.hidden),
        vectors);
  }
  if (p.weights != nullptr && row >= 0) {
    reinterpret_cast<float*>(slot(lane_id()) + g.combine_slot.weights_offset)[0] = __ldg(p.weights + row);
  }
}

}  // namespace epc::kernels
