// SPDX-License-Identifier: Apache-2.0
// The LL token layouts (RANK_MAJOR, FLAT) of the reference model, as reference_ll_tokens.hpp
// specifies them, written to be read side by side with that text.
#include "tests/reference/reference_ll_tokens.hpp"

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace epc::ref {
namespace {

std::size_t entry_index(const Problem& p, int token, int slot) {
  return static_cast<std::size_t>(token) * p.topk + slot;
}

bool sends_to(const Problem& p, int r, int t, int d) {
  for (int k = 0; k < p.topk; ++k) {
    const int64_t expert = p.ranks[r].topk_idx[entry_index(p, t, k)];
    if (expert != -1 && p.rank_of_expert(expert) == d) return true;
  }
  return false;
}

}  // namespace

std::vector<std::vector<int32_t>> ll_token_rows(const Problem& problem, LlTokenLayout layout) {
  validate_problem(problem);
  const Problem& p = problem;
  std::vector<std::vector<int32_t>> token_row(p.nranks);
  std::vector<int32_t> received(p.nranks, 0);  // per destination d: rows so far (FLAT)
  for (int r = 0; r < p.nranks; ++r) {
    std::vector<int32_t> place(p.nranks, 0);  // per destination d: rank r's tokens so far
    token_row[r].assign(static_cast<std::size_t>(p.ranks[r].num_tokens) * p.nranks, -1);
    for (int t = 0; t < p.ranks[r].num_tokens; ++t) {
      for (int d = 0; d < p.nranks; ++d) {
        if (!sends_to(p, r, t, d)) continue;
        token_row[r][static_cast<std::size_t>(t) * p.nranks + d] =
            layout == LlTokenLayout::kRankMajor ? r * p.max_tokens + place[d] : received[d];
        ++place[d];
        ++received[d];
      }
    }
  }
  return token_row;
}

std::vector<LlTokenResult> ll_dispatch_tokens(const Problem& problem, const LlTokenOptions& options) {
  const Problem& p = problem;
  const std::vector<std::vector<int32_t>> token_row = ll_token_rows(p, options.layout);  // validates
  LlSourcePayload payload(p, options.use_fp8, options.round_scale_ue8m0, options.passthrough, options.format,
                          "ll_dispatch_tokens");
  const int L = p.local_experts();
  const std::size_t K = static_cast<std::size_t>(p.topk);
  const std::size_t rows = static_cast<std::size_t>(p.nranks) * p.max_tokens;

  std::vector<LlTokenResult> results(p.nranks);
  for (LlTokenResult& out : results) {
    out.rows = static_cast<int>(rows);
    out.is_fp8 = options.use_fp8;
    out.written.assign(rows, 0);
    payload.allocate(out, rows);
    out.recv_topk_idx.assign(rows * K, -1);
    out.recv_topk_weights.assign(rows * K, 0.0f);
    out.expert_counts.assign(L, 0);
    out.rank_counts.assign(p.nranks, 0);
    out.src.assign(rows, TokenRef{});
  }

  for (int r = 0; r < p.nranks; ++r) {
    const RankTokens& rank = p.ranks[r];
    for (int t = 0; t < rank.num_tokens; ++t) {
      payload.load(rank, t);
      for (int q = 0; q < p.nranks; ++q) {
        const int32_t at = token_row[r][static_cast<std::size_t>(t) * p.nranks + q];
        if (at == -1) continue;
        const std::size_t row = static_cast<std::size_t>(at);
        LlTokenResult& out = results[q];
        out.written[row] = 1;
        payload.store(out, row);
        for (int k = 0; k < p.topk; ++k) {
          const int64_t expert = rank.topk_idx[entry_index(p, t, k)];
          if (expert == -1 || p.rank_of_expert(expert) != q) continue;
          const int local_id = p.local_id_of_expert(expert);
          out.recv_topk_idx[row * K + k] = options.global_expert_ids ? q * L + local_id : local_id;
          out.recv_topk_weights[row * K + k] = rank.topk_weights[entry_index(p, t, k)];
          ++out.expert_counts[local_id];
        }
        ++out.rank_counts[r];
        ++out.num_recv;
        out.src[row] = TokenRef{r, t};
      }
    }
  }
  return results;
}

std::vector<std::vector<float>> ll_combine_tokens_sums(const Problem& problem,
                                                       const std::vector<std::vector<uint16_t>>& x_per_rank,
                                                       LlTokenLayout layout) {
  const Problem& p = problem;
  const std::vector<std::vector<int32_t>> token_row = ll_token_rows(p, layout);  // validates
  const std::size_t H = static_cast<std::size_t>(p.hidden);
  const std::size_t expected = static_cast<std::size_t>(p.nranks) * p.max_tokens * H;
  if (x_per_rank.size() != static_cast<std::size_t>(p.nranks)) {
    throw std::invalid_argument("epc::ref::ll_combine_tokens: x_per_rank has " + std::to_string(x_per_rank.size()) +
                                " ranks, expected " + std::to_string(p.nranks));
  }
  for (int q = 0; q < p.nranks; ++q) {
    if (x_per_rank[q].size() != expected) {
      throw std::invalid_argument("epc::ref::ll_combine_tokens: x_per_rank[" + std::to_string(q) + "] has " +
                                  std::to_string(x_per_rank[q].size()) +
                                  " elements, expected nranks * max_tokens * hidden = " + std::to_string(expected));
    }
  }
  std::vector<std::vector<float>> sums(p.nranks);
  for (int r = 0; r < p.nranks; ++r) {
    sums[r].assign(static_cast<std::size_t>(p.ranks[r].num_tokens) * H, 0.0f);
    for (int t = 0; t < p.ranks[r].num_tokens; ++t) {
      for (std::size_t c = 0; c < H; ++c) {
        float acc = 0.0f;
        for (int d = 0; d < p.nranks; ++d) {
          const int32_t row = token_row[r][static_cast<std::size_t>(t) * p.nranks + d];
          if (row == -1) continue;
          acc = acc + bf16_to_float(x_per_rank[d][static_cast<std::size_t>(row) * H + c]);
        }
        sums[r][t * H + c] = acc;
      }
    }
  }
  return sums;
}

std::vector<std::vector<uint16_t>> ll_combine_tokens(const Problem& problem,
                                                     const std::vector<std::vector<uint16_t>>& x_per_rank,
                                                     LlTokenLayout layout) {
  std::vector<std::vector<uint16_t>> out;
  for (const std::vector<float>& sums : ll_combine_tokens_sums(problem, x_per_rank, layout)) {
    out.push_back(round_sums(sums, Dtype::kBf16));
  }
  return out;
}

}  // namespace epc::ref
