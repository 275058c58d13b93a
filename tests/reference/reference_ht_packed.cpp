// SPDX-License-Identifier: Apache-2.0
// The HT EXPERT_PACKED layout of the reference model, as reference_ht_packed.hpp states it.
#include "tests/reference/reference_ht_packed.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

#include "tests/reference/node_sum.hpp"

namespace epc::ref {
namespace {

int64_t alignment_of(int64_t alignment) {
  if (alignment < 0) throw std::invalid_argument("ht packed layout: alignment must not be negative");
  return alignment == 0 ? 1 : alignment;
}

// The bytes of token t's payload and scales on `rank`.
void token_bytes(const Problem& p, const RankTokens& rank, int t, const HtPackedResult& format, bool fp8,
                 bool passthrough, const uint8_t** payload, const uint8_t** scales) {
  const std::size_t H = static_cast<std::size_t>(p.hidden);
  if (passthrough) {
    *payload = rank.x_quant.data() + static_cast<std::size_t>(t) * format.row_bytes;
    *scales = rank.x_scale_bytes.data() + static_cast<std::size_t>(t) * format.scale_bytes;
  } else if (fp8) {
    *payload = rank.x_fp8.data() + t * H;
    *scales = reinterpret_cast<const uint8_t*>(rank.fp8_scales.data() + t * (H / kFp8BlockChannels));
  } else {
    *payload = reinterpret_cast<const uint8_t*>(rank.x.data() + t * H);
    *scales = nullptr;
  }
}

// Row of every entry on its expert's rank: [r][t * K + k], -1 where masked.
std::vector<std::vector<int64_t>> entry_rows(const Problem& p, int64_t alignment,
                                             std::vector<std::vector<int32_t>>* counts_out,
                                             std::vector<std::vector<int64_t>>* offsets_out) {
  const int L = p.local_experts();
  std::vector<std::vector<int32_t>> counts(p.nranks, std::vector<int32_t>(L, 0));
  for (const RankTokens& rank : p.ranks) {
    for (int64_t expert : rank.topk_idx) {
      if (expert != -1) ++counts[p.rank_of_expert(expert)][p.local_id_of_expert(expert)];
    }
  }
  std::vector<std::vector<int64_t>> offsets(p.nranks, std::vector<int64_t>(L + 1, 0));
  for (int q = 0; q < p.nranks; ++q) {
    for (int l = 0; l < L; ++l) offsets[q][l + 1] = offsets[q][l] + ht_packed_zone_rows(counts[q][l], alignment);
  }
  // Visiting entries in (r, t, k) order and appending orders each zone.
  std::vector<std::vector<int64_t>> next = offsets;
  std::vector<std::vector<int64_t>> rows(p.nranks);
  for (int r = 0; r < p.nranks; ++r) {
    const RankTokens& rank = p.ranks[r];
    rows[r].assign(rank.topk_idx.size(), -1);
    for (std::size_t i = 0; i < rank.topk_idx.size(); ++i) {
      const int64_t expert = rank.topk_idx[i];
      if (expert != -1) rows[r][i] = next[p.rank_of_expert(expert)][p.local_id_of_expert(expert)]++;
    }
  }
  if (counts_out != nullptr) *counts_out = std::move(counts);
  if (offsets_out != nullptr) *offsets_out = std::move(offsets);
  return rows;
}

}  // namespace

int64_t ht_packed_zone_rows(int64_t count, int64_t alignment) {
  const int64_t a = alignment_of(alignment);
  return (count + a - 1) / a * a;
}

int64_t ht_packed_worst_rows(int64_t entries, int64_t zones, int64_t alignment) {
  const int64_t a = alignment_of(alignment);
  if (entries <= 0 || zones <= 0) return 0;
  // A zone of n > 0 entries takes at most n + a - 1 rows, and the total is a multiple of a.
  return (entries + std::min(zones, entries) * (a - 1)) / a * a;
}

std::vector<HtPackedResult> ht_dispatch_packed(const Problem& problem, const HtPackedOptions& options) {
  const Problem& p = problem;
  validate_problem(p);
  const bool fp8 = options.payload == HtPayload::kFp8;
  const bool passthrough = options.payload == HtPayload::kPassthrough;
  if (passthrough) {
    validate_passthrough_payload(p, options.passthrough);
  } else if (fp8) {
    validate_fp8_payload(p);
  } else {
    validate_x16_payload(p);
  }
  const int64_t a = alignment_of(options.alignment);
  std::vector<std::vector<int32_t>> counts;
  std::vector<std::vector<int64_t>> offsets;
  const auto rows = entry_rows(p, a, &counts, &offsets);
  const int L = p.local_experts();
  const std::size_t K = static_cast<std::size_t>(p.topk);

  std::vector<HtPackedResult> results(p.nranks);
  for (int q = 0; q < p.nranks; ++q) {
    HtPackedResult& out = results[q];
    out.rows = static_cast<int>(offsets[q][L]);
    out.row_bytes = passthrough ? passthrough_row_bytes(p.hidden, options.passthrough) : fp8 ? p.hidden : 2 * p.hidden;
    out.scale_bytes = passthrough ? passthrough_scale_bytes(options.passthrough)
                      : fp8       ? static_cast<int>(p.hidden / kFp8BlockChannels * sizeof(float))
                                  : 0;
    out.payload.assign(static_cast<std::size_t>(out.rows) * out.row_bytes, 0);
    out.scales.assign(static_cast<std::size_t>(out.rows) * out.scale_bytes, 0);
    out.weights.assign(out.rows, 0.0f);
    out.src.assign(out.rows, SourceRef{});
    out.expert_counts = counts[q];
    out.expert_offsets = offsets[q];
    for (int32_t c : counts[q]) out.num_recv += c;
  }
  for (int r = 0; r < p.nranks; ++r) {
    const RankTokens& rank = p.ranks[r];
    for (int t = 0; t < rank.num_tokens; ++t) {
      const uint8_t* payload = nullptr;
      const uint8_t* scales = nullptr;
      token_bytes(p, rank, t, results[0], fp8, passthrough, &payload, &scales);
      for (std::size_t k = 0; k < K; ++k) {
        const int64_t row = rows[r][t * K + k];
        if (row < 0) continue;
        HtPackedResult& out = results[p.rank_of_expert(rank.topk_idx[t * K + k])];
        const float weight = rank.topk_weights[t * K + k];
        std::memcpy(out.payload.data() + row * out.row_bytes, payload, out.row_bytes);
        if (out.scale_bytes > 0) std::memcpy(out.scales.data() + row * out.scale_bytes, scales, out.scale_bytes);
        out.weights[row] = weight;
        out.src[row] = SourceRef{r, t, static_cast<int32_t>(k), weight};
      }
    }
  }
  return results;
}

namespace {

enum class PackedWeights { kNone, kSender, kHome };

// ht_combine_packed and ht_combine_packed_home: `home` is [r][B_r * K] with kHome;
// `node_size` as ht_combine_packed's (0: one node).
HtCombineResult combine_packed(const Problem& problem, const std::vector<std::vector<uint16_t>>& y_per_rank,
                               PackedWeights weights, const std::vector<std::vector<float>>& home, int alignment,
                               const std::vector<std::vector<float>>& g_per_rank, int node_size, const char* name) {
  const Problem& p = problem;
  validate_problem(p);
  if (node_size == 0) node_size = p.nranks;
  if (node_size < 1 || p.nranks % node_size != 0) {
    throw std::invalid_argument(std::string(name) + ": node_size must divide nranks (or be 0)");
  }
  std::vector<std::vector<int64_t>> offsets;
  const auto rows = entry_rows(p, alignment, nullptr, &offsets);
  const int L = p.local_experts();
  const std::size_t H = static_cast<std::size_t>(p.hidden);
  const std::size_t K = static_cast<std::size_t>(p.topk);
  const std::string fn = name;
  if (y_per_rank.size() != static_cast<std::size_t>(p.nranks)) {
    throw std::invalid_argument(fn + ": y_per_rank must have one entry per rank");
  }
  const bool backward = !g_per_rank.empty();
  if (backward && g_per_rank.size() != static_cast<std::size_t>(p.nranks)) {
    throw std::invalid_argument(fn + ": g_per_rank must be empty or have one entry per rank");
  }
  if (weights == PackedWeights::kHome && home.size() != static_cast<std::size_t>(p.nranks)) {
    throw std::invalid_argument(fn + ": home_weights must have one entry per rank");
  }
  for (int q = 0; q < p.nranks; ++q) {
    const std::size_t n = static_cast<std::size_t>(offsets[q][L]);
    if (y_per_rank[q].size() != n * H) {
      throw std::invalid_argument(fn + ": y_per_rank[" + std::to_string(q) +
                                  "] must hold rows * hidden = " + std::to_string(n * H) + " values");
    }
    if (backward && g_per_rank[q].size() != n) {
      throw std::invalid_argument(fn + ": g_per_rank[" + std::to_string(q) + "] must hold " + std::to_string(n) +
                                  " values");
    }
    if (weights == PackedWeights::kHome && home[q].size() != static_cast<std::size_t>(p.ranks[q].num_tokens) * K) {
      throw std::invalid_argument(fn + ": home_weights[" + std::to_string(q) + "] must hold B * topk = " +
                                  std::to_string(static_cast<std::size_t>(p.ranks[q].num_tokens) * K) + " values");
    }
  }
  HtCombineResult result;
  result.x.resize(p.nranks);
  result.sums.resize(p.nranks);
  if (backward) result.topk_weights.resize(p.nranks);
  for (int r = 0; r < p.nranks; ++r) {
    const RankTokens& rank = p.ranks[r];
    const std::size_t B = static_cast<std::size_t>(rank.num_tokens);
    result.x[r].assign(B * H, 0);
    result.sums[r].assign(B * H, 0.0f);
    if (backward) result.topk_weights[r].assign(B * K, 0.0f);
    auto y_of = [&](std::size_t t, std::size_t k, std::size_t c) {
      const int64_t expert = rank.topk_idx[t * K + k];
      return bf16_to_float(y_per_rank[p.rank_of_expert(expert)][static_cast<std::size_t>(rows[r][t * K + k]) * H + c]);
    };
    for (std::size_t t = 0; t < B; ++t) {
      for (std::size_t c = 0; c < H; ++c) {
        float acc = 0.0f;
        if (weights == PackedWeights::kHome) {
          // Every entry's row came home: one fp32 sum in top-k order, no partial.
          for (std::size_t k = 0; k < K; ++k) {
            if (rank.topk_idx[t * K + k] == -1) continue;
            acc = add_rounded_product(acc, home[r][t * K + k], y_of(t, k, c));
          }
        } else {
          // Each rank's bf16 partial of the token's entries there, in the order combine
          // across nodes sums them.
          acc = sum_across_nodes(p.nranks, node_size, r / node_size, [&](int d, float* term) {
            float partial = 0.0f;
            bool any = false;
            for (std::size_t k = 0; k < K; ++k) {
              const int64_t expert = rank.topk_idx[t * K + k];
              if (expert == -1 || p.rank_of_expert(expert) != d) continue;
              const float w = weights == PackedWeights::kSender ? rank.topk_weights[t * K + k] : 1.0f;
              partial = add_rounded_product(partial, w, y_of(t, k, c));
              any = true;
            }
            *term = bf16_to_float(float_to_bf16(partial));
            return any;
          });
        }
        result.sums[r][t * H + c] = acc;
        result.x[r][t * H + c] = float_to_bf16(acc);
      }
      if (!backward) continue;
      for (std::size_t k = 0; k < K; ++k) {
        const int64_t expert = rank.topk_idx[t * K + k];
        if (expert == -1) continue;
        result.topk_weights[r][t * K + k] = g_per_rank[p.rank_of_expert(expert)][rows[r][t * K + k]];
      }
    }
  }
  return result;
}

}  // namespace

HtCombineResult ht_combine_packed(const Problem& problem, const std::vector<std::vector<uint16_t>>& y_per_rank,
                                  bool weighted, int alignment, const std::vector<std::vector<float>>& g_per_rank,
                                  int node_size) {
  return combine_packed(problem, y_per_rank, weighted ? PackedWeights::kSender : PackedWeights::kNone, {}, alignment,
                        g_per_rank, node_size, "ht_combine_packed");
}

HtCombineResult ht_combine_packed_home(const Problem& problem, const std::vector<std::vector<uint16_t>>& y_per_rank,
                                       const std::vector<std::vector<float>>& home_weights, int alignment,
                                       const std::vector<std::vector<float>>& g_per_rank) {
  return combine_packed(problem, y_per_rank, PackedWeights::kHome, home_weights, alignment, g_per_rank, 0,
                        "ht_combine_packed_home");
}

}  // namespace epc::ref
