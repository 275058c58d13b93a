// SPDX-License-Identifier: Apache-2.0
// Validation of a reference Problem: every shape and routing rule of reference.hpp, checked
// before any mode reads the arrays, so the modes can index without further checks.
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "tests/reference/reference.hpp"

namespace epc::ref {
namespace {

[[noreturn]] void reject(const std::string& message) { throw std::invalid_argument("epc::ref: " + message); }

void require_size(std::size_t actual, std::size_t expected, int rank, const char* field, const char* shape) {
  if (actual != expected) {
    reject("ranks[" + std::to_string(rank) + "]." + field + " has " + std::to_string(actual) + " elements, expected " +
           std::to_string(expected) + " (" + shape + ")");
  }
}

}  // namespace

void validate_problem(const Problem& problem) {
  const Problem& p = problem;
  if (p.nranks < 1) reject("nranks must be >= 1, got " + std::to_string(p.nranks));
  if (p.num_experts < 1) reject("num_experts must be >= 1, got " + std::to_string(p.num_experts));
  if (p.num_experts % p.nranks != 0) {
    reject("num_experts (" + std::to_string(p.num_experts) + ") must be a multiple of nranks (" +
           std::to_string(p.nranks) + ")");
  }
  if (p.hidden <= 0 || p.hidden % 8 != 0) {
    reject("hidden must be a positive multiple of 8 (rows of 16-byte units), got " + std::to_string(p.hidden));
  }
  if (p.topk < 1 || p.topk > kMaxTopk) {
    reject("topk must be in [1, " + std::to_string(kMaxTopk) + "], got " + std::to_string(p.topk));
  }
  if (p.max_tokens < 0) reject("max_tokens must be >= 0, got " + std::to_string(p.max_tokens));
  if (p.ranks.size() != static_cast<std::size_t>(p.nranks)) {
    reject("ranks has " + std::to_string(p.ranks.size()) + " entries, expected nranks = " + std::to_string(p.nranks));
  }
  for (int r = 0; r < p.nranks; ++r) {
    const RankTokens& rank = p.ranks[r];
    if (rank.num_tokens < 0 || rank.num_tokens > p.max_tokens) {
      reject("ranks[" + std::to_string(r) + "].num_tokens = " + std::to_string(rank.num_tokens) +
             " is outside [0, max_tokens = " + std::to_string(p.max_tokens) + "]");
    }
    const std::size_t entries = static_cast<std::size_t>(rank.num_tokens) * p.topk;
    require_size(rank.topk_idx.size(), entries, r, "topk_idx", "num_tokens * topk");
    require_size(rank.topk_weights.size(), entries, r, "topk_weights", "num_tokens * topk");
    for (std::size_t i = 0; i < entries; ++i) {
      const int64_t expert = rank.topk_idx[i];
      if (expert < -1 || expert >= p.num_experts) {
        reject("topk_idx[rank " + std::to_string(r) + "][token " + std::to_string(i / p.topk) + "][slot " +
               std::to_string(i % p.topk) + "] = " + std::to_string(expert) +
               " is outside [-1, num_experts = " + std::to_string(p.num_experts) + ")");
      }
    }
  }
}

void validate_x16_payload(const Problem& problem) {
  for (int r = 0; r < problem.nranks; ++r) {
    const RankTokens& rank = problem.ranks[r];
    require_size(rank.x.size(), static_cast<std::size_t>(rank.num_tokens) * problem.hidden, r, "x",
                 "num_tokens * hidden");
  }
}

void validate_fp8_payload(const Problem& problem) {
  if (problem.hidden % kFp8BlockChannels != 0) {
    reject("fp8 needs hidden to be a multiple of 128 (one scale per 128 channels), got " +
           std::to_string(problem.hidden));
  }
  const std::size_t blocks = static_cast<std::size_t>(problem.hidden / kFp8BlockChannels);
  for (int r = 0; r < problem.nranks; ++r) {
    const RankTokens& rank = problem.ranks[r];
    const std::size_t tokens = static_cast<std::size_t>(rank.num_tokens);
    require_size(rank.x_fp8.size(), tokens * problem.hidden, r, "x_fp8", "num_tokens * hidden");
    require_size(rank.fp8_scales.size(), tokens * blocks, r, "fp8_scales", "num_tokens * hidden / 128");
  }
}

int scale_dtype_bytes(ScaleDtype dtype) {
  switch (dtype) {
    case ScaleDtype::kFp32:
    case ScaleDtype::kE8m0x4:
      return 4;
    case ScaleDtype::kBf16:
      return 2;
    case ScaleDtype::kE8m0:
    case ScaleDtype::kUint8:
      return 1;
  }
  reject("unknown scale dtype");
}

int passthrough_row_bytes(int hidden, const PassthroughFormat& format) {
  if (format.payload == QuantPayload::kE4m3) {
    if (hidden % 16 != 0) reject("e4m3 passthrough needs hidden to be a multiple of 16, got " + std::to_string(hidden));
    return hidden;
  }
  if (hidden % 32 != 0) reject("e2m1 passthrough needs hidden to be a multiple of 32, got " + std::to_string(hidden));
  return hidden / 2;
}

int passthrough_scale_bytes(const PassthroughFormat& format) {
  if (format.scale_count < 1) {
    reject("passthrough needs a scale_count of at least 1, got " + std::to_string(format.scale_count));
  }
  return format.scale_count * scale_dtype_bytes(format.scales);
}

void validate_passthrough_payload(const Problem& problem, const PassthroughFormat& format) {
  const std::size_t row = static_cast<std::size_t>(passthrough_row_bytes(problem.hidden, format));
  const std::size_t scales = static_cast<std::size_t>(passthrough_scale_bytes(format));
  for (int r = 0; r < problem.nranks; ++r) {
    const RankTokens& rank = problem.ranks[r];
    const std::size_t tokens = static_cast<std::size_t>(rank.num_tokens);
    require_size(rank.x_quant.size(), tokens * row, r, "x_quant", "num_tokens * row_bytes");
    require_size(rank.x_scale_bytes.size(), tokens * scales, r, "x_scale_bytes", "num_tokens * scale_bytes");
  }
}

void copy_passthrough_token(const RankTokens& rank, int t, std::size_t row_bytes, std::size_t scale_bytes,
                            uint8_t* row_out, uint8_t* scales_out) {
  const std::size_t token = static_cast<std::size_t>(t);
  std::copy_n(rank.x_quant.begin() + token * row_bytes, row_bytes, row_out);
  std::copy_n(rank.x_scale_bytes.begin() + token * scale_bytes, scale_bytes, scales_out);
}

}  // namespace epc::ref
