// SPDX-License-Identifier: Apache-2.0
#include "bench/output_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>

#include "tests/reference/reference.hpp"
#include "tests/reference/reference_ll_tokens.hpp"

namespace epc::bench {

float bf16_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t float_to_bf16(float value) {
  uint32_t u;
  std::memcpy(&u, &value, sizeof u);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) return 0x7FC0;  // NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

std::vector<float> expected_combine(const Routing& routing, int tokens, int topk, int local_experts, int nranks,
                                    bool per_rank_partials) {
  const float w = 1.0f / static_cast<float>(topk);
  std::vector<float> expected(static_cast<size_t>(tokens));
  for (int t = 0; t < tokens; ++t) {
    std::vector<float> partial(static_cast<size_t>(nranks), 0.0f);
    std::vector<int> entries(static_cast<size_t>(nranks), 0);
    float all = 0.0f;
    for (int k = 0; k < topk; ++k) {
      const int64_t e = routing[static_cast<size_t>(t) * topk + k];
      if (e < 0) continue;
      const size_t d = static_cast<size_t>(e / local_experts);
      partial[d] += w;  // weight x 1.0, in top-k order
      entries[d]++;
      all += w;
    }
    float sum = 0.0f;
    if (per_rank_partials) {
      for (int d = 0; d < nranks; ++d) {
        if (entries[static_cast<size_t>(d)] > 0) sum += bf16_to_float(float_to_bf16(partial[static_cast<size_t>(d)]));
      }
    } else {
      sum = all;
    }
    expected[static_cast<size_t>(t)] = bf16_to_float(float_to_bf16(sum));
  }
  return expected;
}

std::vector<float> expected_ht_combine(const Routing& routing, int tokens, int topk, int local_experts, int nranks) {
  std::vector<float> expected(static_cast<size_t>(tokens));
  std::vector<char> hosts(static_cast<size_t>(nranks));
  for (int t = 0; t < tokens; ++t) {
    std::fill(hosts.begin(), hosts.end(), 0);
    for (int k = 0; k < topk; ++k) {
      const int64_t e = routing[static_cast<size_t>(t) * topk + k];
      if (e >= 0) hosts[static_cast<size_t>(e / local_experts)] = 1;
    }
    float sum = 0.0f;  // one 1.0 row per receiving rank, summed in fp32
    for (char h : hosts) sum += h ? 1.0f : 0.0f;
    expected[static_cast<size_t>(t)] = bf16_to_float(float_to_bf16(sum));
  }
  return expected;
}

bool check_combined(const std::vector<uint16_t>& out, int tokens, int hidden, const std::vector<float>& expected,
                    std::string& error) {
  for (int t = 0; t < tokens; ++t) {
    const float want = expected[static_cast<size_t>(t)];
    const float tolerance = std::ldexp(std::fabs(want), -7);  // once per token: HT checks 10^8 values
    for (int h = 0; h < hidden; ++h) {
      const float got = bf16_to_float(out[static_cast<size_t>(t) * hidden + h]);
      if (!(std::fabs(got - want) <= tolerance)) {
        char text[200];
        std::snprintf(text, sizeof text, "combine output of token %d, channel %d is %g; expected %g", t, h,
                      static_cast<double>(got), static_cast<double>(want));
        error = text;
        return false;
      }
    }
  }
  return true;
}

bool check_counts(const std::vector<int32_t>& got, const std::vector<int32_t>& expected, std::string& error) {
  if (got.size() != expected.size()) {
    error = "got " + std::to_string(got.size()) + " expert counts, expected " + std::to_string(expected.size());
    return false;
  }
  for (size_t l = 0; l < got.size(); ++l) {
    if (got[l] != expected[l]) {
      error = "dispatch delivered " + std::to_string(got[l]) + " rows to local expert " + std::to_string(l) +
              "; the routing sends " + std::to_string(expected[l]);
      return false;
    }
  }
  return true;
}

uint8_t passthrough_row_byte(int rank, int token, int64_t b) {
  return static_cast<uint8_t>(rank * 131 + token * 31 + b * 7 + 1);
}

uint8_t passthrough_scale_byte(int rank, int token, int64_t b) {
  return static_cast<uint8_t>(rank * 61 + token * 29 + b * 11 + 5);
}

bool ll_row_sources(const std::vector<Routing>& all, int rank, int tokens, int topk, int experts, int max_tokens,
                    LlRows rows, std::vector<RowSource>& out, std::string& error) {
  // The model carries each token's identity in a passthrough row of 16 bytes: rank, token.
  constexpr int kRowBytes = 16;
  ref::PassthroughFormat format;
  format.payload = ref::QuantPayload::kE4m3;
  format.scales = ref::ScaleDtype::kUint8;
  format.scale_count = 1;
  ref::Problem p;
  p.nranks = static_cast<int>(all.size());
  p.num_experts = experts;
  p.hidden = kRowBytes;
  p.topk = topk;
  p.max_tokens = max_tokens;
  p.ranks.resize(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    ref::RankTokens& mine = p.ranks[r];
    mine.num_tokens = tokens;
    mine.topk_idx = all[r];
    mine.topk_weights.assign(all[r].size(), 1.0f / static_cast<float>(topk));
    mine.x_quant.assign(static_cast<size_t>(tokens) * kRowBytes, 0);
    mine.x_scale_bytes.assign(static_cast<size_t>(tokens), 0);
    for (int t = 0; t < tokens; ++t) {
      const int32_t id[2] = {static_cast<int32_t>(r), t};
      std::memcpy(&mine.x_quant[static_cast<size_t>(t) * kRowBytes], id, sizeof id);
    }
  }
  std::vector<uint8_t> written, x;
  try {
    if (rows == LlRows::kExpertPadded) {
      ref::LlDispatchOptions o;
      o.passthrough = true;
      o.format = format;
      const ref::LlDispatchResult got = ref::ll_dispatch(p, o)[static_cast<size_t>(rank)];
      written.assign(static_cast<size_t>(got.local_experts) * got.rows_per_expert, 0);
      for (int l = 0; l < got.local_experts; ++l) {
        for (int i = 0; i < got.counts[static_cast<size_t>(l)]; ++i) written[got.row_index(l, i)] = 1;
      }
      x = got.x_quant;
    } else {
      ref::LlTokenOptions o;
      o.layout = rows == LlRows::kRankMajor ? ref::LlTokenLayout::kRankMajor : ref::LlTokenLayout::kFlat;
      o.passthrough = true;
      o.format = format;
      const ref::LlTokenResult got = ref::ll_dispatch_tokens(p, o)[static_cast<size_t>(rank)];
      written = got.written;
      x = got.x_quant;
    }
  } catch (const std::exception& e) {
    error = std::string("the reference model refused the routing: ") + e.what();
    return false;
  }
  out.assign(written.size(), RowSource{});
  for (size_t i = 0; i < written.size(); ++i) {
    if (!written[i]) continue;
    int32_t id[2];
    std::memcpy(id, &x[i * kRowBytes], sizeof id);
    out[i] = RowSource{id[0], id[1]};
  }
  return true;
}

bool check_passthrough_rows(const std::vector<RowSource>& sources, const std::vector<uint8_t>& x, int64_t row_bytes,
                            const std::vector<uint8_t>& scales, int64_t scale_bytes, std::string& error) {
  for (size_t i = 0; i < sources.size(); ++i) {
    const RowSource s = sources[i];
    if (s.rank < 0) continue;
    for (int64_t b = 0; b < row_bytes; ++b) {
      const uint8_t got = x[i * static_cast<size_t>(row_bytes) + static_cast<size_t>(b)];
      if (got != passthrough_row_byte(s.rank, s.token, b)) {
        error = "out_x row " + std::to_string(i) + " byte " + std::to_string(b) + " is " + std::to_string(got) +
                "; token " + std::to_string(s.token) + " of rank " + std::to_string(s.rank) + " has " +
                std::to_string(passthrough_row_byte(s.rank, s.token, b));
        return false;
      }
    }
    for (int64_t b = 0; b < scale_bytes; ++b) {
      const uint8_t got = scales[i * static_cast<size_t>(scale_bytes) + static_cast<size_t>(b)];
      if (got != passthrough_scale_byte(s.rank, s.token, b)) {
        error = "out_scales of row " + std::to_string(i) + " byte " + std::to_string(b) + " is " + std::to_string(got) +
                "; token " + std::to_string(s.token) + " of rank " + std::to_string(s.rank) + " has " +
                std::to_string(passthrough_scale_byte(s.rank, s.token, b));
        return false;
      }
    }
  }
  return true;
}

}  // namespace epc::bench
