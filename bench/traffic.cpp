#include "bench/traffic.hpp"

#include <algorithm>
#include <cstdio>

namespace epc::bench {

WireFormat WireFormat::for_dtype(int hidden, bool fp8) {
  WireFormat w;
  const int64_t h = hidden;
  w.dispatch_row_bytes = fp8 ? h + h / 128 * 4 : 2 * h;
  w.combine_row_bytes = 2 * h;
  return w;
}

std::string WireFormat::describe() const {
  char text[512];
  std::snprintf(text, sizeof text,
                "dispatch: per (token, remote rank) %lld B header + %lld B per entry, plus a "
                "%lld B row when the token has an entry there; combine: a %lld B row per "
                "(token, remote rank with entries); %lld B per local expert of each peer for the "
                "count table; %lld B signal per peer per half",
                static_cast<long long>(header_fixed_bytes), static_cast<long long>(header_entry_bytes),
                static_cast<long long>(dispatch_row_bytes), static_cast<long long>(combine_row_bytes),
                static_cast<long long>(count_entry_bytes), static_cast<long long>(signal_bytes));
  return text;
}

RankTraffic compute_traffic(const std::vector<Routing>& all, int rank, int tokens, int topk,
                            int experts, const WireFormat& wire, int64_t row_capacity) {
  const int R = static_cast<int>(all.size());
  const int L = experts / R;
  RankTraffic t;
  t.dispatch_to.assign(static_cast<size_t>(R), 0);
  t.combine_to.assign(static_cast<size_t>(R), 0);
  t.baseline_rows_to.assign(static_cast<size_t>(R), 0);
  t.baseline_rows_from.assign(static_cast<size_t>(R), 0);
  std::vector<int64_t> counts(static_cast<size_t>(L), 0);
  std::vector<int> entries_on(static_cast<size_t>(R));

  for (int s = 0; s < R; ++s) {
    const Routing& routing = all[static_cast<size_t>(s)];
    for (int tok = 0; tok < tokens; ++tok) {
      std::fill(entries_on.begin(), entries_on.end(), 0);
      for (int k = 0; k < topk; ++k) {
        const int64_t e = routing[static_cast<size_t>(tok) * topk + k];
        if (e < 0) continue;
        const int d = static_cast<int>(e / L);
        entries_on[static_cast<size_t>(d)]++;
        if (d == rank) counts[static_cast<size_t>(e % L)]++;
      }
      for (int d = 0; d < R; ++d) {
        const int n = entries_on[static_cast<size_t>(d)];
        if (s == rank) {
          t.selections += n;
          t.baseline_rows_to[static_cast<size_t>(d)] += n;
          if (d != rank) {
            t.dispatch_to[static_cast<size_t>(d)] += wire.header_fixed_bytes +
                                                     n * wire.header_entry_bytes +
                                                     (n > 0 ? wire.dispatch_row_bytes : 0);
          }
        }
        if (d == rank) {
          t.baseline_rows_from[static_cast<size_t>(s)] += n;
          // Combine returns one pre-reduced row per token that had entries here.
          if (s != rank && n > 0) t.combine_to[static_cast<size_t>(s)] += wire.combine_row_bytes;
        }
      }
    }
  }

  t.logical_dispatch_bytes = t.selections * wire.dispatch_row_bytes;
  t.logical_combine_bytes = t.selections * wire.combine_row_bytes;
  const int64_t signals = static_cast<int64_t>(R - 1) * wire.signal_bytes;
  const int64_t count_tables = static_cast<int64_t>(R - 1) * (experts / R) * wire.count_entry_bytes;
  t.wire_dispatch_bytes = signals + count_tables;
  t.wire_combine_bytes = signals;
  for (int d = 0; d < R; ++d) {
    t.wire_dispatch_bytes += t.dispatch_to[static_cast<size_t>(d)];
    t.wire_combine_bytes += t.combine_to[static_cast<size_t>(d)];
    if (d == rank) continue;
    // The baseline moves bf16 rows (2H, as combine's) whatever --dtype says, and its count
    // exchange sends L int32 counts to every peer.
    t.baseline_wire_dispatch_bytes += t.baseline_rows_to[static_cast<size_t>(d)] * wire.combine_row_bytes +
                                      static_cast<int64_t>(L) * 4;
    t.baseline_wire_combine_bytes += t.baseline_rows_from[static_cast<size_t>(d)] * wire.combine_row_bytes;
  }
  for (int64_t c : counts) t.expected_counts.push_back(static_cast<int32_t>(std::min(c, row_capacity)));
  return t;
}

}  // namespace epc::bench
