// SPDX-License-Identifier: Apache-2.0
#include "bench/gather.hpp"

#include <cstring>

namespace epc::bench {

uint64_t names_fingerprint(const MetricList& metrics) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& m : metrics) {
    for (unsigned char c : m.first + '\n') {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

bool gather_metrics(RankSession& session, const MetricList& mine, std::vector<Metric>& out, std::string& error) {
  const int R = session.nranks();
  struct Head {
    uint64_t fingerprint;
    int64_t count;
  } head{names_fingerprint(mine), static_cast<int64_t>(mine.size())};
  std::vector<uint8_t> heads;
  if (!session.allgather(&head, sizeof head, heads, error)) return false;
  for (int r = 0; r < R; ++r) {
    Head other;
    std::memcpy(&other, heads.data() + static_cast<size_t>(r) * sizeof other, sizeof other);
    if (other.fingerprint != head.fingerprint || other.count != head.count) {
      error = "rank " + std::to_string(r) + " measured other figures than rank " + std::to_string(session.rank()) +
              " (a bug in epcomm-bench)";
      return false;
    }
  }
  std::vector<double> values;
  for (const auto& m : mine) {
    values.insert(values.end(), {m.second.p10_us, m.second.median_us, m.second.p90_us,
                                 static_cast<double>(m.second.samples), m.second.mean_us});
  }
  std::vector<uint8_t> all;
  const size_t bytes = values.size() * sizeof(double);
  if (bytes > 0 && !session.allgather(values.data(), bytes, all, error)) return false;
  out.clear();
  for (size_t i = 0; i < mine.size(); ++i) {
    std::vector<Summary> per_rank;
    for (int r = 0; r < R; ++r) {
      double v[5];
      std::memcpy(v, all.data() + static_cast<size_t>(r) * bytes + i * sizeof v, sizeof v);
      Summary s;
      s.p10_us = v[0];
      s.median_us = v[1];
      s.p90_us = v[2];
      s.samples = static_cast<int>(v[3]);
      s.mean_us = v[4];
      per_rank.push_back(s);
    }
    out.push_back(Metric{mine[i].first, across_ranks(per_rank)});
  }
  return true;
}

}  // namespace epc::bench
