// Bytes a benchmark point moves, counted from the routing of every rank (bench/JSON.md,
// "bytes"). Logical bytes follow DeepEP's rule for low-latency mode (one row per (token,
// expert) selection); wire bytes are what leaves the GPU, that is what our kernels store into
// other GPUs' memory, following their message format (the WireFormat below: keep it in step
// with kernels/ll_message.hpp, ll_dispatch_send.cuh and ll_combine_parts.cuh). Pure CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/routing.hpp"

namespace epc::bench {

struct WireFormat {
  int64_t dispatch_row_bytes = 0;  // bf16: 2H; fp8: H + 4 * H/128 (row and scales)
  int64_t combine_row_bytes = 0;   // 2H: combine is bf16
  // Every (token, remote rank) gets a header: token index and entry count, then one
  // (local expert, position, weight) entry per entry on that rank; the row follows if there
  // is one (kernels/ll_message.hpp). Each dispatch also sends every peer a table of int32
  // entry counts, one per local expert of that peer.
  int64_t header_fixed_bytes = 8;
  int64_t header_entry_bytes = 12;
  int64_t count_entry_bytes = 4;
  int64_t signal_bytes = 8;  // per peer per half: one release-stored uint64

  static WireFormat for_dtype(int hidden, bool fp8);
  std::string describe() const;  // one line for the JSON record
};

struct RankTraffic {
  int64_t selections = 0;  // unmasked (token, expert) entries of this rank's tokens
  int64_t logical_dispatch_bytes = 0;
  int64_t logical_combine_bytes = 0;
  std::vector<int64_t> dispatch_to;  // [R] payload bytes stored into rank d (0 for itself)
  std::vector<int64_t> combine_to;   // [R]
  int64_t wire_dispatch_bytes = 0;   // sum of dispatch_to plus signals
  int64_t wire_combine_bytes = 0;
  // The baseline sends one row per selection, grouped by destination (self included).
  std::vector<int64_t> baseline_rows_to;    // [R]
  std::vector<int64_t> baseline_rows_from;  // [R]
  int64_t baseline_wire_dispatch_bytes = 0;  // remote rows + the count exchange
  int64_t baseline_wire_combine_bytes = 0;
  std::vector<int32_t> expected_counts;  // [L] rows our dispatch must deliver per local expert
};

// `all[r]` is rank r's [tokens, topk] routing; every rank has `tokens` tokens. Local experts
// are experts / nranks. `row_capacity` caps expected_counts (out_x has R * max_tokens rows).
RankTraffic compute_traffic(const std::vector<Routing>& all, int rank, int tokens, int topk,
                            int experts, const WireFormat& wire, int64_t row_capacity);

}  // namespace epc::bench
