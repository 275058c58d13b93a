// SPDX-License-Identifier: Apache-2.0
// A warp sums bf16 rows element by element in fp32, in a fixed order of terms, and rounds
// once to the output's type: the order the reference model states for combine (tests/reference), so the
// GPU result is bit-exact. Used for a token's final sum (with EPC_WEIGHTING_HOME, over its
// entries' rows, each weighted) and, across nodes, for the partial sum of the rows a node
// returns for it.
#pragma once

#include <cstdint>

#include "kernels/device/bf16.cuh"
#include "kernels/device/sum_store.cuh"
#include "kernels/device/warp.cuh"
#include "kernels/wire/limits.hpp"

namespace epc::kernels {

constexpr int kBf16PerVector = kHalfChannelsPerVector;
// Vectors per lane, and term rows, whose loads are in flight together (by default).
constexpr int kRowSumVectors = 2;
constexpr int kRowSumTerms = 4;

// A term computed by the warp instead of read from memory: none. A computed term either
// gives its vectors (`vector(i)`, kFromRow false) or, kFromRow, is read from the row that
// row_of gives for it, like any term, and turned into its value by `finish(raw)` (its loads
// then overlap the other terms' instead of preceding them).
struct NoComputedTerm {
  static constexpr bool kAny = false;
  static constexpr bool kFromRow = false;
  __device__ int index() const { return -1; }
  __device__ int4 vector(int) const { return make_int4(0, 0, 0, 0); }
  __device__ int4 finish(int4 raw) const { return raw; }
};

// Term weights: none, every term added as it is.
struct UnitTermWeights {
  static constexpr bool kAny = false;
  __device__ float operator()(int) const { return 1.0f; }
};

// The sum below with terms weighted: acc + w_n * float(row_n[i]) (add_rounded_product).
template <typename WeightOf>
struct TermWeights {
  static constexpr bool kAny = true;
  WeightOf weight_of;
  __device__ float operator()(int n) const { return weight_of(n); }
};

// out[i] = out_type(sum over terms n = 0 .. terms-1 ascending of float(row_n[i])), +0 with no
// term; with `weights` (TermWeights), each term is w_n * float(row_n[i]) and is added as
// add_rounded_product does (the product rounded to fp32 first). `row_of(n)` returns term n's
// row of `vectors` 16-byte vectors, or nullptr where term n is absent; a lane calls it (and
// `weights(n)` where the row is present) for the terms it looks up (n = first + lane), so they
// may read per-lane state. Rows are read with __ldcg (peers wrote them). Term
// `computed.index()` (when not -1, and Computed::kAny; row_of must return non-null for it) is
// instead `computed.vector(i)`, which the whole warp calls together. With `round_bf16`, each
// sum is rounded to bf16 before it is stored as out_type (a partial sum that stands for the
// whole). A lane loads kVectorsInFlight vectors of up to kTermsInFlight rows before adding
// them. Every lane must call.
template <typename RowOf, typename Computed = NoComputedTerm, typename Weights = UnitTermWeights,
          int kTermsInFlight = kRowSumTerms, int kVectorsInFlight = kRowSumVectors>
__device__ __forceinline__ void warp_sum_bf16_rows(int terms, RowOf row_of, int vectors, void* out, SumOutput out_type,
                                                   const Computed& computed = Computed{},
                                                   const Weights& weights = Weights{}, bool round_bf16 = false) {
  const int lane = lane_id();
  for (int base = 0; base < vectors; base += kVectorsInFlight * kWarpSize) {
    int4 own[kVectorsInFlight];
    if (Computed::kAny && !Computed::kFromRow && computed.index() >= 0) {
#pragma unroll
      for (int u = 0; u < kVectorsInFlight; ++u) {
        const int i = base + u * kWarpSize + lane;
        own[u] = computed.vector(i < vectors ? i : 0);
      }
    }
    float acc[kVectorsInFlight][kBf16PerVector];
#pragma unroll
    for (int u = 0; u < kVectorsInFlight; ++u) {
#pragma unroll
      for (int e = 0; e < kBf16PerVector; ++e) acc[u][e] = 0.0f;
    }
    for (int first = 0; first < terms; first += kWarpSize) {
      // Lane i holds term first + i's row (and weight), if present.
      const int4* my_src = first + lane < terms ? row_of(first + lane) : nullptr;
      const float my_weight = Weights::kAny && my_src != nullptr ? weights(first + lane) : 1.0f;
      unsigned rest = __ballot_sync(0xffffffffu, my_src != nullptr);
      while (rest != 0) {
        // Up to kTermsInFlight rows loaded at once, then added in ascending term order.
        int4 raw[kTermsInFlight][kVectorsInFlight];
        float weight[kTermsInFlight];
        bool finish[kTermsInFlight];  // Computed::kFromRow: term s is the computed one
        int taken = 0;
#pragma unroll
        for (int s = 0; s < kTermsInFlight; ++s) {
          if (rest == 0) break;
          const int owner = __ffs(rest) - 1;
          rest &= rest - 1;
          const int4* src =
              reinterpret_cast<const int4*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(my_src), owner));
          if constexpr (Weights::kAny) weight[s] = __shfl_sync(0xffffffffu, my_weight, owner);
          const bool is_computed = Computed::kAny && first + owner == computed.index();
          finish[s] = Computed::kFromRow && is_computed;
#pragma unroll
          for (int u = 0; u < kVectorsInFlight; ++u) {
            const int i = base + u * kWarpSize + lane;
            raw[s][u] = is_computed && !Computed::kFromRow ? own[u]
                        : i < vectors                      ? __ldcg(src + i)
                                                           : make_int4(0, 0, 0, 0);
          }
          ++taken;
        }
#pragma unroll
        for (int s = 0; s < kTermsInFlight; ++s) {
          if (s >= taken) break;
#pragma unroll
          for (int u = 0; u < kVectorsInFlight; ++u) {
            if constexpr (Computed::kFromRow) {
              if (finish[s]) raw[s][u] = computed.finish(raw[s][u]);
            }
            const uint16_t* bits = reinterpret_cast<const uint16_t*>(&raw[s][u]);
#pragma unroll
            for (int e = 0; e < kBf16PerVector; ++e) {
              if constexpr (Weights::kAny) {
                acc[u][e] = add_rounded_product(acc[u][e], weight[s], bf16_bits_to_float(bits[e]));
              } else {
                acc[u][e] = __fadd_rn(acc[u][e], bf16_bits_to_float(bits[e]));
              }
            }
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kVectorsInFlight; ++u) {
      const int i = base + u * kWarpSize + lane;
      if (i >= vectors) continue;
      if (round_bf16) {
#pragma unroll
        for (int e = 0; e < kBf16PerVector; ++e) acc[u][e] = bf16_bits_to_float(float_to_bf16_bits(acc[u][e]));
      }
      store_sum_vector(out, i, acc[u], out_type);
    }
  }
}

}  // namespace epc::kernels
