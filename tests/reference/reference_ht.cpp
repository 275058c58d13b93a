// SPDX-License-Identifier: Apache-2.0
// High-Throughput mode of the reference model: token-major dispatch (one row per token and
// destination rank) and the unweighted fp32 combine. Semantics are specified in
// reference.hpp; this file follows them literally.
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/reference/node_sum.hpp"
#include "tests/reference/reference.hpp"

namespace epc::ref {
namespace {

std::size_t entry_index(const Problem& p, int token, int slot) {
  return static_cast<std::size_t>(token) * p.topk + slot;
}

std::size_t token_rank_index(const Problem& p, int token, int dest_rank) {
  return static_cast<std::size_t>(token) * p.nranks + dest_rank;
}

[[noreturn]] void reject_combine(const std::string& message) {
  throw std::invalid_argument("epc::ref::ht_combine: " + message);
}

void validate_combine_input(const Problem& p, const HtLayout& layout,
                            const std::vector<std::vector<uint16_t>>& x_per_rank,
                            const std::vector<std::vector<float>>& w_per_rank) {
  if (x_per_rank.size() != static_cast<std::size_t>(p.nranks)) {
    reject_combine("x_per_rank has " + std::to_string(x_per_rank.size()) + " ranks, expected " +
                   std::to_string(p.nranks));
  }
  if (!w_per_rank.empty() && w_per_rank.size() != static_cast<std::size_t>(p.nranks)) {
    reject_combine("topk_weights_per_rank has " + std::to_string(w_per_rank.size()) +
                   " ranks, expected 0 (no backward weights) or " + std::to_string(p.nranks));
  }
  for (int q = 0; q < p.nranks; ++q) {
    const std::size_t rows = static_cast<std::size_t>(layout.rows[q]);
    if (x_per_rank[q].size() != rows * p.hidden) {
      reject_combine("x_per_rank[" + std::to_string(q) + "] has " + std::to_string(x_per_rank[q].size()) +
                     " elements, expected rows * " + "hidden = " + std::to_string(rows * p.hidden));
    }
    if (!w_per_rank.empty() && w_per_rank[q].size() != rows * p.topk) {
      reject_combine("topk_weights_per_rank[" + std::to_string(q) + "] has " + std::to_string(w_per_rank[q].size()) +
                     " elements, expected rows * " + "topk = " + std::to_string(rows * p.topk));
    }
  }
}

}  // namespace

HtLayout ht_layout(const Problem& problem, int64_t capacity) {
  validate_problem(problem);
  if (capacity < 0) throw std::invalid_argument("ht_layout: capacity must be >= 0 (0: no limit)");
  const Problem& p = problem;
  HtLayout layout;
  layout.num_recv.assign(p.nranks, 0);
  layout.token_row.resize(p.nranks);
  std::vector<bool> sent_to(p.nranks);
  // Visiting tokens in (r, t) order and appending is what orders each rank's received rows
  // by (source rank, source token).
  for (int r = 0; r < p.nranks; ++r) {
    const RankTokens& rank = p.ranks[r];
    layout.token_row[r].assign(static_cast<std::size_t>(rank.num_tokens) * p.nranks, -1);
    for (int t = 0; t < rank.num_tokens; ++t) {
      std::fill(sent_to.begin(), sent_to.end(), false);
      for (int k = 0; k < p.topk; ++k) {
        const int64_t expert = rank.topk_idx[entry_index(p, t, k)];
        if (expert != -1) sent_to[p.rank_of_expert(expert)] = true;
      }
      for (int d = 0; d < p.nranks; ++d) {
        if (!sent_to[d]) continue;
        // Row numbers past the capacity are dropped (the lowest (r, t) are kept first).
        const int32_t row = layout.num_recv[d]++;
        layout.token_row[r][token_rank_index(p, t, d)] = capacity == 0 || row < capacity ? row : -1;
      }
    }
  }
  layout.rows.resize(p.nranks);
  for (int q = 0; q < p.nranks; ++q) {
    layout.rows[q] =
        capacity == 0 ? layout.num_recv[q] : static_cast<int32_t>(std::min<int64_t>(layout.num_recv[q], capacity));
  }
  return layout;
}

HtOverflow ht_overflow_seen_by(const HtLayout& layout, int q) {
  auto over = [&layout](int d) { return static_cast<int64_t>(layout.num_recv[d]) - layout.rows[d]; };
  HtOverflow o;
  if (over(q) > 0) {
    o.rank = q;
  } else {
    for (int d = 0; d < static_cast<int>(layout.num_recv.size()) && o.rank < 0; ++d) {
      if (over(d) > 0) o.rank = d;
    }
  }
  if (o.rank >= 0) o.rows = over(o.rank);
  return o;
}

std::vector<HtDispatchResult> ht_dispatch(const Problem& problem, const HtDispatchOptions& options) {
  const Problem& p = problem;
  const HtLayout layout = ht_layout(p, options.capacity);  // validates the problem
  const bool fp8 = options.payload == HtPayload::kFp8;
  const bool passthrough = options.payload == HtPayload::kPassthrough;
  std::size_t row_bytes = 0, scale_bytes = 0;
  if (passthrough) {
    validate_passthrough_payload(p, options.passthrough);
    row_bytes = static_cast<std::size_t>(passthrough_row_bytes(p.hidden, options.passthrough));
    scale_bytes = static_cast<std::size_t>(passthrough_scale_bytes(options.passthrough));
  } else if (fp8) {
    validate_fp8_payload(p);
  } else {
    validate_x16_payload(p);
  }
  const int L = p.local_experts();
  const std::size_t H = static_cast<std::size_t>(p.hidden);
  const std::size_t K = static_cast<std::size_t>(p.topk);
  const std::size_t blocks = H / kFp8BlockChannels;

  std::vector<HtDispatchResult> results(p.nranks);
  for (int q = 0; q < p.nranks; ++q) {
    HtDispatchResult& out = results[q];
    const std::size_t rows = static_cast<std::size_t>(layout.rows[q]);
    out.num_recv = layout.num_recv[q];
    out.rows = layout.rows[q];
    out.dropped = layout.num_recv[q] - layout.rows[q];
    out.is_fp8 = fp8;
    if (passthrough) {
      out.x_quant.assign(rows * row_bytes, 0);
      out.x_scale_bytes.assign(rows * scale_bytes, 0);
    } else if (fp8) {
      out.x_fp8.assign(rows * H, 0);
      out.fp8_scales.assign(rows * blocks, 0.0f);
    } else {
      out.x.assign(rows * H, 0);
    }
    out.recv_topk_idx.assign(rows * K, -1);
    out.recv_topk_weights.assign(rows * K, 0.0f);
    out.expert_counts.assign(L, 0);
    out.tokens_from_rank.assign(p.nranks, 0);
    out.src.assign(rows, TokenRef{});
  }

  for (int r = 0; r < p.nranks; ++r) {
    const RankTokens& rank = p.ranks[r];
    for (int t = 0; t < rank.num_tokens; ++t) {
      for (int q = 0; q < p.nranks; ++q) {
        const int32_t row_of_token = layout.token_row[r][token_rank_index(p, t, q)];
        if (row_of_token == -1) continue;
        const std::size_t row = static_cast<std::size_t>(row_of_token);
        HtDispatchResult& out = results[q];
        if (passthrough) {
          copy_passthrough_token(rank, t, row_bytes, scale_bytes, out.x_quant.data() + row * row_bytes,
                                 out.x_scale_bytes.data() + row * scale_bytes);
        } else if (fp8) {
          std::copy_n(rank.x_fp8.begin() + t * H, H, out.x_fp8.begin() + row * H);
          std::copy_n(rank.fp8_scales.begin() + t * blocks, blocks, out.fp8_scales.begin() + row * blocks);
        } else {
          std::copy_n(rank.x.begin() + t * H, H, out.x.begin() + row * H);
        }
        for (int k = 0; k < p.topk; ++k) {
          const int64_t expert = rank.topk_idx[entry_index(p, t, k)];
          if (expert == -1 || p.rank_of_expert(expert) != q) continue;
          const int local_id = p.local_id_of_expert(expert);
          out.recv_topk_idx[row * K + k] = options.global_expert_ids ? q * L + local_id : local_id;
          out.recv_topk_weights[row * K + k] = rank.topk_weights[entry_index(p, t, k)];
          ++out.expert_counts[local_id];
        }
        ++out.tokens_from_rank[r];
        out.src[row] = TokenRef{r, t};
      }
    }
  }
  return results;
}

HtCombineResult ht_combine(const Problem& problem, const std::vector<std::vector<uint16_t>>& x_per_rank,
                           const std::vector<std::vector<float>>& topk_weights_per_rank, int node_size,
                           int64_t capacity) {
  const Problem& p = problem;
  const HtLayout layout = ht_layout(p, capacity);  // validates the problem
  if (node_size == 0) node_size = p.nranks;
  if (node_size < 1 || p.nranks % node_size != 0) {
    throw std::invalid_argument("ht_combine: node_size must divide nranks (or be 0)");
  }
  validate_combine_input(p, layout, x_per_rank, topk_weights_per_rank);
  const bool with_weights = !topk_weights_per_rank.empty();
  const std::size_t H = static_cast<std::size_t>(p.hidden);
  const std::size_t K = static_cast<std::size_t>(p.topk);

  HtCombineResult result;
  result.x.resize(p.nranks);
  result.sums.resize(p.nranks);
  if (with_weights) result.topk_weights.resize(p.nranks);
  for (int r = 0; r < p.nranks; ++r) {
    const RankTokens& rank = p.ranks[r];
    const std::size_t tokens = static_cast<std::size_t>(rank.num_tokens);
    result.x[r].assign(tokens * H, 0);
    result.sums[r].assign(tokens * H, 0.0f);
    for (int t = 0; t < rank.num_tokens; ++t) {
      for (std::size_t c = 0; c < H; ++c) {
        // Each rank's returned row, in the order combine across nodes sums them.
        const float acc = sum_across_nodes(p.nranks, node_size, r / node_size, [&](int d, float* term) {
          const int32_t row = layout.token_row[r][token_rank_index(p, t, d)];
          if (row == -1) return false;
          *term = bf16_to_float(x_per_rank[d][static_cast<std::size_t>(row) * H + c]);
          return true;
        });
        result.sums[r][t * H + c] = acc;
        result.x[r][t * H + c] = float_to_bf16(acc);
      }
    }
    if (!with_weights) continue;
    result.topk_weights[r].assign(tokens * K, 0.0f);
    for (int t = 0; t < rank.num_tokens; ++t) {
      for (int k = 0; k < p.topk; ++k) {
        const int64_t expert = rank.topk_idx[entry_index(p, t, k)];
        if (expert == -1) continue;
        const int d = p.rank_of_expert(expert);
        const int32_t row = layout.token_row[r][token_rank_index(p, t, d)];
        if (row == -1) continue;  // dropped there
        result.topk_weights[r][t * K + k] = topk_weights_per_rank[d][static_cast<std::size_t>(row) * K + k];
      }
    }
  }
  return result;
}

}  // namespace epc::ref
