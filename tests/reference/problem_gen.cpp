// SPDX-License-Identifier: Apache-2.0
// Deterministic random Problems; see problem_gen.hpp. The draw order (per rank: token count,
// then per token: its row values, then its top-k entries, then its weights) is part of what
// makes a seed reproducible, so changing it changes every generated Problem.
#include "tests/reference/problem_gen.hpp"

#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace epc::ref {
namespace {

// Platform-independent draws from the standard-fixed mt19937_64 sequence.
class Draws {
 public:
  explicit Draws(uint64_t seed) : engine_(seed) {}

  // Uniform integer in [0, n) for n >= 1 (modulo bias is irrelevant at test sizes).
  int below(int n) { return static_cast<int>(engine_() % static_cast<uint64_t>(n)); }

  // Uniform in [0, 1) with 24 random bits: exactly representable as a float.
  float unit_float() { return static_cast<float>(engine_() >> 40) * 0x1.0p-24f; }

  // Uniform in [0, 1) with 53 random bits, for probabilities.
  double unit_double() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

 private:
  std::mt19937_64 engine_;
};

[[noreturn]] void reject(const std::string& message) {
  throw std::invalid_argument("epc::ref::make_random_problem: " + message);
}

void validate_options(const ProblemGenOptions& o) {
  // The shape rules are validate_problem's; check them on an empty problem of this shape.
  Problem shape;
  shape.nranks = o.nranks;
  shape.num_experts = o.num_experts;
  shape.hidden = o.hidden;
  shape.topk = o.topk;
  shape.max_tokens = o.max_tokens;
  shape.ranks.resize(o.nranks > 0 ? static_cast<std::size_t>(o.nranks) : 0);
  validate_problem(shape);
  if (!o.allow_duplicate_experts && o.topk > o.num_experts) {
    reject("topk (" + std::to_string(o.topk) + ") > num_experts (" + std::to_string(o.num_experts) +
           ") needs allow_duplicate_experts");
  }
  if (!(o.hot_expert_share >= 0.0 && o.hot_expert_share <= 1.0)) {
    reject("hot_expert_share must be in [0, 1]");
  }
  if (!(o.masked_fraction >= 0.0 && o.masked_fraction <= 1.0)) {
    reject("masked_fraction must be in [0, 1]");
  }
  if (o.hot_expert < 0 || o.hot_expert >= o.num_experts) {
    reject("hot_expert must be in [0, num_experts), got " + std::to_string(o.hot_expert));
  }
  if (o.with_fp8 && o.hidden % kFp8BlockChannels != 0) {
    reject("with_fp8 needs hidden to be a multiple of 128, got " + std::to_string(o.hidden));
  }
}

uint16_t random_element(Draws& draws, Dtype dtype) {
  const float value = draws.unit_float() * 8.0f - 4.0f;
  return dtype == Dtype::kBf16 ? float_to_bf16(value) : float_to_fp16(value);
}

bool row_contains(const int64_t* row, int count, int64_t expert) {
  for (int j = 0; j < count; ++j) {
    if (row[j] == expert) return true;
  }
  return false;
}

// Draws one token's K expert ids (before masking). Without duplicates the hot expert is
// offered only while the row does not hold it yet, and uniform draws are redrawn on a clash
// (K <= E makes that terminate).
void draw_experts(Draws& draws, const ProblemGenOptions& o, int64_t* row) {
  const bool unique = !o.allow_duplicate_experts;
  for (int k = 0; k < o.topk; ++k) {
    const bool hot_available = !(unique && row_contains(row, k, o.hot_expert));
    if (hot_available && draws.unit_double() < o.hot_expert_share) {
      row[k] = o.hot_expert;
      continue;
    }
    do {
      row[k] = draws.below(o.num_experts);
    } while (unique && row_contains(row, k, row[k]));
  }
}

}  // namespace

Problem make_random_problem(const ProblemGenOptions& options) {
  const ProblemGenOptions& o = options;
  validate_options(o);
  Draws draws(o.seed);
  Problem p;
  p.nranks = o.nranks;
  p.num_experts = o.num_experts;
  p.hidden = o.hidden;
  p.topk = o.topk;
  p.max_tokens = o.max_tokens;
  p.dtype = o.dtype;
  p.ranks.resize(o.nranks);
  const std::size_t H = static_cast<std::size_t>(o.hidden);
  const std::size_t K = static_cast<std::size_t>(o.topk);
  for (RankTokens& rank : p.ranks) {
    rank.num_tokens = o.random_token_counts ? draws.below(o.max_tokens + 1) : o.max_tokens;
    const std::size_t tokens = static_cast<std::size_t>(rank.num_tokens);
    rank.x.resize(tokens * H);
    rank.topk_idx.resize(tokens * K);
    rank.topk_weights.resize(tokens * K);
    for (std::size_t t = 0; t < tokens; ++t) {
      for (std::size_t c = 0; c < H; ++c) rank.x[t * H + c] = random_element(draws, o.dtype);
      int64_t* idx_row = rank.topk_idx.data() + t * K;
      draw_experts(draws, o, idx_row);
      for (std::size_t k = 0; k < K; ++k) {
        if (draws.unit_double() < o.masked_fraction) idx_row[k] = -1;
      }
      for (std::size_t k = 0; k < K; ++k) rank.topk_weights[t * K + k] = draws.unit_float();
    }
    if (o.with_fp8) {
      const std::size_t blocks = H / kFp8BlockChannels;
      rank.x_fp8.resize(tokens * H);
      rank.fp8_scales.resize(tokens * blocks);
      std::vector<float> row(H);
      for (std::size_t t = 0; t < tokens; ++t) {
        for (std::size_t c = 0; c < H; ++c) row[c] = to_float(o.dtype, rank.x[t * H + c]);
        quantize_row_fp8(row.data(), o.hidden, o.round_scale_ue8m0, rank.x_fp8.data() + t * H,
                         rank.fp8_scales.data() + t * blocks);
      }
    }
  }
  validate_problem(p);
  return p;
}

}  // namespace epc::ref
