// SPDX-License-Identifier: Apache-2.0
// Low-Latency mode of the reference model: expert-major dispatch and weighted combine.
// The semantics are specified in reference.hpp; this file follows them literally, one float
// operation per statement, so the code can be read side by side with the specification.
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/reference/reference.hpp"

namespace epc::ref {
namespace {

std::size_t entry_index(const Problem& p, int token, int slot) {
  return static_cast<std::size_t>(token) * p.topk + slot;
}

void validate_combine_input(const Problem& p, const std::vector<std::vector<uint16_t>>& y) {
  if (y.size() != static_cast<std::size_t>(p.nranks)) {
    throw std::invalid_argument("epc::ref::ll_combine: y_per_rank has " + std::to_string(y.size()) +
                                " ranks, expected " + std::to_string(p.nranks));
  }
  const std::size_t expected = static_cast<std::size_t>(p.local_experts()) * p.nranks * p.max_tokens * p.hidden;
  for (int q = 0; q < p.nranks; ++q) {
    if (y[q].size() != expected) {
      throw std::invalid_argument("epc::ref::ll_combine: y_per_rank[" + std::to_string(q) + "] has " +
                                  std::to_string(y[q].size()) +
                                  " elements, expected local_experts * nranks * max_tokens * "
                                  "hidden = " +
                                  std::to_string(expected));
    }
  }
}

// The bf16 value of channel c of the row that entry (r, t, k) was dispatched into.
float expert_output(const Problem& p, const LlLayout& layout, const std::vector<std::vector<uint16_t>>& y, int r, int t,
                    int k, int c) {
  const int64_t expert = p.ranks[r].topk_idx[entry_index(p, t, k)];
  const int q = p.rank_of_expert(expert);
  const std::size_t row = static_cast<std::size_t>(p.local_id_of_expert(expert)) * layout.rows_per_expert +
                          layout.entry_row[r][entry_index(p, t, k)];
  return bf16_to_float(y[q][row * p.hidden + c]);
}

// kTopkOrder (weights: the rank's topk_weights) and ll_combine_home (its home weights): one
// float accumulator over the unmasked slots in slot order.
float combine_topk_order(const Problem& p, const LlLayout& layout, const std::vector<std::vector<uint16_t>>& y, int r,
                         int t, int c, const std::vector<float>& weights) {
  const RankTokens& rank = p.ranks[r];
  float acc = 0.0f;
  for (int k = 0; k < p.topk; ++k) {
    if (rank.topk_idx[entry_index(p, t, k)] == -1) continue;
    const float weight = weights[entry_index(p, t, k)];
    acc = add_rounded_product(acc, weight, expert_output(p, layout, y, r, t, k, c));
  }
  return acc;
}

// kPerRankPrereduce: each destination rank reduces its own slots, the partial travels back as
// bf16, and the source rank sums the partials in rank order.
float combine_per_rank_prereduce(const Problem& p, const LlLayout& layout, const std::vector<std::vector<uint16_t>>& y,
                                 int r, int t, int c) {
  const RankTokens& rank = p.ranks[r];
  float acc = 0.0f;
  for (int d = 0; d < p.nranks; ++d) {
    bool hosts_an_entry = false;
    float partial = 0.0f;
    for (int k = 0; k < p.topk; ++k) {
      const int64_t expert = rank.topk_idx[entry_index(p, t, k)];
      if (expert == -1 || p.rank_of_expert(expert) != d) continue;
      hosts_an_entry = true;
      const float weight = rank.topk_weights[entry_index(p, t, k)];
      partial = add_rounded_product(partial, weight, expert_output(p, layout, y, r, t, k, c));
    }
    if (!hosts_an_entry) continue;
    const float partial_on_wire = bf16_to_float(float_to_bf16(partial));
    acc = acc + partial_on_wire;
  }
  return acc;
}

}  // namespace

void quantize_source_token(const Problem& p, const uint16_t* x_row, bool round_scale_ue8m0, std::vector<float>& scratch,
                           uint8_t* q_out, float* scales_out) {
  scratch.resize(p.hidden);
  for (int c = 0; c < p.hidden; ++c) scratch[c] = to_float(p.dtype, x_row[c]);
  quantize_row_fp8(scratch.data(), p.hidden, round_scale_ue8m0, q_out, scales_out);
}

LlLayout ll_layout(const Problem& problem) {
  validate_problem(problem);
  const Problem& p = problem;
  LlLayout layout;
  layout.rows_per_expert = p.nranks * p.max_tokens;
  layout.counts.assign(p.nranks, std::vector<int32_t>(p.local_experts(), 0));
  layout.entry_row.resize(p.nranks);
  // Visiting entries in (r, t, k) order and appending is what makes each expert's rows
  // ordered by (source rank, source token, slot).
  for (int r = 0; r < p.nranks; ++r) {
    const RankTokens& rank = p.ranks[r];
    layout.entry_row[r].assign(static_cast<std::size_t>(rank.num_tokens) * p.topk, -1);
    for (int t = 0; t < rank.num_tokens; ++t) {
      for (int k = 0; k < p.topk; ++k) {
        const int64_t expert = rank.topk_idx[entry_index(p, t, k)];
        if (expert == -1) continue;
        int32_t& count = layout.counts[p.rank_of_expert(expert)][p.local_id_of_expert(expert)];
        if (count == layout.rows_per_expert) {
          throw std::invalid_argument("epc::ref: LL expert " + std::to_string(expert) +
                                      " receives more than nranks * "
                                      "max_tokens = " +
                                      std::to_string(layout.rows_per_expert) +
                                      " rows (duplicate expert ids in top-k rows overflow the LL receive buffer)");
        }
        layout.entry_row[r][entry_index(p, t, k)] = count++;
      }
    }
  }
  return layout;
}

LlSourcePayload::LlSourcePayload(const Problem& p, bool use_fp8, bool round_scale_ue8m0, bool passthrough,
                                 const PassthroughFormat& format, const char* who)
    : p_(p),
      use_fp8_(use_fp8),
      round_scale_ue8m0_(round_scale_ue8m0),
      passthrough_(passthrough),
      hidden_(static_cast<std::size_t>(p.hidden)),
      blocks_(static_cast<std::size_t>(p.hidden) / kFp8BlockChannels),
      row_bytes_(0),
      scale_bytes_(0) {
  const std::string prefix = std::string("epc::ref::") + who + ": ";
  if (passthrough && use_fp8) throw std::invalid_argument(prefix + "passthrough and use_fp8 exclude each other");
  if (passthrough) {
    validate_passthrough_payload(p, format);
    row_bytes_ = static_cast<std::size_t>(passthrough_row_bytes(p.hidden, format));
    scale_bytes_ = static_cast<std::size_t>(passthrough_scale_bytes(format));
  } else {
    validate_x16_payload(p);
  }
  if (use_fp8 && p.hidden % kFp8BlockChannels != 0) {
    throw std::invalid_argument(prefix + "fp8 needs hidden to be a multiple of 128, got " + std::to_string(p.hidden));
  }
  fp8_.resize(use_fp8 ? hidden_ : 0);
  scales_.resize(use_fp8 ? blocks_ : 0);
}

void LlSourcePayload::load(const RankTokens& rank, int t) {
  rank_ = &rank;
  t_ = t;
  x_row_ = passthrough_ ? nullptr : rank.x.data() + static_cast<std::size_t>(t) * hidden_;
  if (use_fp8_) quantize_source_token(p_, x_row_, round_scale_ue8m0_, scratch_, fp8_.data(), scales_.data());
}

std::vector<LlDispatchResult> ll_dispatch(const Problem& problem, const LlDispatchOptions& options) {
  const Problem& p = problem;
  const LlLayout layout = ll_layout(p);  // validates the problem
  LlSourcePayload payload(p, options.use_fp8, options.round_scale_ue8m0, options.passthrough, options.format,
                          "ll_dispatch");
  const int L = p.local_experts();
  const std::size_t rows = static_cast<std::size_t>(L) * layout.rows_per_expert;

  std::vector<LlDispatchResult> results(p.nranks);
  for (int q = 0; q < p.nranks; ++q) {
    LlDispatchResult& out = results[q];
    out.local_experts = L;
    out.rows_per_expert = layout.rows_per_expert;
    out.hidden = p.hidden;
    out.is_fp8 = options.use_fp8;
    out.counts = layout.counts[q];
    out.src.assign(rows, SourceRef{});
    payload.allocate(out, rows);
  }

  for (int r = 0; r < p.nranks; ++r) {
    const RankTokens& rank = p.ranks[r];
    for (int t = 0; t < rank.num_tokens; ++t) {
      payload.load(rank, t);
      for (int k = 0; k < p.topk; ++k) {
        const int64_t expert = rank.topk_idx[entry_index(p, t, k)];
        if (expert == -1) continue;
        LlDispatchResult& out = results[p.rank_of_expert(expert)];
        const std::size_t row = out.row_index(p.local_id_of_expert(expert), layout.entry_row[r][entry_index(p, t, k)]);
        payload.store(out, row);
        out.src[row] = SourceRef{r, t, k, rank.topk_weights[entry_index(p, t, k)]};
      }
    }
  }
  return results;
}

std::vector<std::vector<float>> ll_combine_sums(const Problem& problem,
                                                const std::vector<std::vector<uint16_t>>& y_per_rank,
                                                CombineOrder order) {
  const Problem& p = problem;
  const LlLayout layout = ll_layout(p);  // validates the problem
  validate_combine_input(p, y_per_rank);
  std::vector<std::vector<float>> sums(p.nranks);
  for (int r = 0; r < p.nranks; ++r) {
    const int tokens = p.ranks[r].num_tokens;
    sums[r].assign(static_cast<std::size_t>(tokens) * p.hidden, 0.0f);
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < p.hidden; ++c) {
        sums[r][static_cast<std::size_t>(t) * p.hidden + c] =
            order == CombineOrder::kTopkOrder
                ? combine_topk_order(p, layout, y_per_rank, r, t, c, p.ranks[r].topk_weights)
                : combine_per_rank_prereduce(p, layout, y_per_rank, r, t, c);
      }
    }
  }
  return sums;
}

std::vector<std::vector<uint16_t>> ll_combine(const Problem& problem,
                                              const std::vector<std::vector<uint16_t>>& y_per_rank,
                                              CombineOrder order) {
  const std::vector<std::vector<float>> sums = ll_combine_sums(problem, y_per_rank, order);
  std::vector<std::vector<uint16_t>> out;
  out.reserve(sums.size());
  for (const std::vector<float>& rank_sums : sums) out.push_back(round_sums(rank_sums, Dtype::kBf16));
  return out;
}

std::vector<std::vector<float>> ll_combine_home_sums(const Problem& problem,
                                                     const std::vector<std::vector<uint16_t>>& y_per_rank,
                                                     const std::vector<std::vector<float>>& home_weights) {
  const Problem& p = problem;
  const LlLayout layout = ll_layout(p);  // validates the problem
  validate_combine_input(p, y_per_rank);
  if (home_weights.size() != static_cast<std::size_t>(p.nranks)) {
    throw std::invalid_argument("epc::ref::ll_combine_home: home_weights has " + std::to_string(home_weights.size()) +
                                " ranks, expected " + std::to_string(p.nranks));
  }
  std::vector<std::vector<float>> sums(p.nranks);
  for (int r = 0; r < p.nranks; ++r) {
    const int tokens = p.ranks[r].num_tokens;
    const std::size_t want = static_cast<std::size_t>(tokens) * p.topk;
    if (home_weights[r].size() != want) {
      throw std::invalid_argument("epc::ref::ll_combine_home: home_weights[" + std::to_string(r) + "] has " +
                                  std::to_string(home_weights[r].size()) +
                                  " values, expected B * topk = " + std::to_string(want));
    }
    sums[r].assign(static_cast<std::size_t>(tokens) * p.hidden, 0.0f);
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < p.hidden; ++c) {
        sums[r][static_cast<std::size_t>(t) * p.hidden + c] =
            combine_topk_order(p, layout, y_per_rank, r, t, c, home_weights[r]);
      }
    }
  }
  return sums;
}

std::vector<std::vector<uint16_t>> ll_combine_home(const Problem& problem,
                                                   const std::vector<std::vector<uint16_t>>& y_per_rank,
                                                   const std::vector<std::vector<float>>& home_weights) {
  const std::vector<std::vector<float>> sums = ll_combine_home_sums(problem, y_per_rank, home_weights);
  std::vector<std::vector<uint16_t>> out;
  out.reserve(sums.size());
  for (const std::vector<float>& rank_sums : sums) out.push_back(round_sums(rank_sums, Dtype::kBf16));
  return out;
}

std::vector<uint16_t> round_sums(const std::vector<float>& sums, Dtype dtype) {
  std::vector<uint16_t> out(sums.size());
  for (std::size_t i = 0; i < sums.size(); ++i) {
    out[i] = dtype == Dtype::kBf16 ? float_to_bf16(sums[i]) : float_to_fp16(sums[i]);
  }
  return out;
}

}  // namespace epc::ref
