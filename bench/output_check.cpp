// SPDX-License-Identifier: Apache-2.0
#include "bench/output_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

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

}  // namespace epc::bench
