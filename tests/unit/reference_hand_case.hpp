// SPDX-License-Identifier: Apache-2.0
// The hand-worked routing shared by the LL and HT reference-model tests, and helpers to
// write expected values literally.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "tests/reference/reference.hpp"

namespace epc::ref::hand_case {

// bf16 bits of a float that is exactly representable in bf16 (low 16 bits zero).
inline uint16_t exact_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0xFFFFu) != 0) ADD_FAILURE() << value << " is not exact in bf16";
  return static_cast<uint16_t>(bits >> 16);
}

// Recognisable payload bits: 0x1000 + 0x100*rank + 0x10*token + channel.
inline uint16_t payload(int rank, int token, int channel) {
  return static_cast<uint16_t>(0x1000 + 0x100 * rank + 0x10 * token + channel);
}

// R=2, E=4 (L=2: experts 0,1 on rank 0; 2,3 on rank 1), H=8, K=2, T=3.
//   rank 0: t0 -> [1, 2] w [0.5, 0.25]; t1 -> [3, -1] w [0.5, 9]; t2 -> [0, 1] w [1, 2]
//   rank 1: t0 -> [2, 0] w [0.5, 1];    t1 -> [1, 1] w [0.5, 1.5] (duplicate);
//           t2 -> [-1, -1] w [7, 7] (masked only)
inline Problem hand_problem() {
  Problem p;
  p.nranks = 2;
  p.num_experts = 4;
  p.hidden = 8;
  p.topk = 2;
  p.max_tokens = 3;
  p.dtype = Dtype::kBf16;
  p.ranks.resize(2);
  p.ranks[0].num_tokens = 3;
  p.ranks[0].topk_idx = {1, 2, 3, -1, 0, 1};
  p.ranks[0].topk_weights = {0.5f, 0.25f, 0.5f, 9.0f, 1.0f, 2.0f};
  p.ranks[1].num_tokens = 3;
  p.ranks[1].topk_idx = {2, 0, 1, 1, -1, -1};
  p.ranks[1].topk_weights = {0.5f, 1.0f, 0.5f, 1.5f, 7.0f, 7.0f};
  for (int r = 0; r < 2; ++r) {
    for (int t = 0; t < 3; ++t) {
      for (int c = 0; c < 8; ++c) p.ranks[r].x.push_back(payload(r, t, c));
    }
  }
  return p;
}

// One token on rank `rank` (the other ranks have none): H = 8, zero payload, entries `idx`
// with `weights`; for hand cases that follow one token's rows through a combine.
inline Problem one_token_problem(int nranks, int num_experts, int rank, std::vector<int64_t> idx,
                                 std::vector<float> weights) {
  Problem p;
  p.nranks = nranks;
  p.num_experts = num_experts;
  p.hidden = 8;
  p.topk = static_cast<int>(idx.size());
  p.max_tokens = 1;
  p.ranks.resize(static_cast<std::size_t>(nranks));
  RankTokens& r = p.ranks[static_cast<std::size_t>(rank)];
  r.num_tokens = 1;
  r.topk_idx = std::move(idx);
  r.topk_weights = std::move(weights);
  r.x.assign(8, 0);
  return p;
}

// ---- Passthrough payloads (EPC_QUANT_PASSTHROUGH) --------------------------------------

// Recognisable bytes: payload byte b of token (r, t) and scale byte i of it.
inline uint8_t row_byte(int r, int t, int b) { return static_cast<uint8_t>((r << 7) | (t << 5) | b); }
inline uint8_t scale_byte(int r, int t, int i) { return static_cast<uint8_t>(0x40 | (r << 5) | (t << 3) | i); }

// The hand routing with hidden 32 and a passthrough payload of `row` and `scales` bytes.
inline Problem passthrough_problem(int row, int scales) {
  Problem p = hand_problem();
  p.hidden = 32;
  for (int r = 0; r < p.nranks; ++r) {
    RankTokens& rank = p.ranks[r];
    rank.x.clear();
    for (int t = 0; t < rank.num_tokens; ++t) {
      for (int b = 0; b < row; ++b) rank.x_quant.push_back(row_byte(r, t, b));
      for (int i = 0; i < scales; ++i) rank.x_scale_bytes.push_back(scale_byte(r, t, i));
    }
  }
  return p;
}

inline PassthroughFormat format(QuantPayload payload, ScaleDtype scales, int count) {
  PassthroughFormat f;
  f.payload = payload;
  f.scales = scales;
  f.scale_count = count;
  return f;
}

}  // namespace epc::ref::hand_case
