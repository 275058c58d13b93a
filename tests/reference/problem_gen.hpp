// SPDX-License-Identifier: Apache-2.0
// Deterministic random Problems for tests and benchmarks.
//
// The same options (seed included) give the same Problem on every platform and standard
// library: the generator uses only the raw 64-bit outputs of std::mt19937_64 (whose sequence
// the C++ standard fixes) and its own mappings to integers and floats, never the
// implementation-defined std::*_distribution classes.
#pragma once

#include <cstdint>

#include "tests/reference/reference.hpp"

namespace epc::ref {

struct ProblemGenOptions {
  int nranks = 2;
  int num_experts = 8;
  int hidden = 128;
  int topk = 2;
  int max_tokens = 4;
  Dtype dtype = Dtype::kBf16;
  uint64_t seed = 1;

  // false: every rank has max_tokens tokens; true: B_r drawn uniformly from [0, max_tokens].
  bool random_token_counts = false;

  // Routing skew: each entry picks `hot_expert` with probability hot_expert_share, otherwise
  // a uniformly random expert. Without duplicates, a token picks each expert at most once
  // (redrawing on a clash), so the hot expert can only take one slot per token.
  double hot_expert_share = 0.0;
  int hot_expert = 0;
  bool allow_duplicate_experts = false;  // duplicates may overflow the LL buffer (see ll_layout)

  // Each entry is independently masked (-1) with this probability, after it was drawn.
  double masked_fraction = 0.0;

  // Also fill x_fp8 / fp8_scales (for HT fp8 dispatch) by quantize_row_fp8 of float(x).
  bool with_fp8 = false;
  bool round_scale_ue8m0 = false;
};

// Token values are float uniform in [-4, 4) rounded to the dtype; weights are float uniform
// in [0, 1). Throws std::invalid_argument for options that cannot make a valid Problem
// (the validate_problem rules, topk > num_experts without duplicates, shares outside [0, 1],
// hot_expert outside [0, num_experts), with_fp8 and hidden % 128 != 0).
Problem make_random_problem(const ProblemGenOptions& options);

}  // namespace epc::ref
