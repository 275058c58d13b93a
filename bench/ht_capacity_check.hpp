// SPDX-License-Identifier: Apache-2.0
// What HT dispatch and combine must produce when the receive window holds fewer rows than R * T
// (--capacity-factor below 1), taken from the CPU reference model (tests/reference/reference.hpp,
// "Receive capacity"): each rank keeps its rows in (source rank, source token) order up to the
// capacity and drops the rest (EPC_OVERFLOW_DROP); under EPC_OVERFLOW_FAIL every rank reports
// the same overflow. The bench's payload is all 1.0 and so are combine's rows, so the model runs
// on rows of 8 channels: every channel of a row carries the same value. A token's combined
// value is then a count of ranks, exact in bf16 in any order of summation, so the model's
// one-node order serves groups of several nodes too (their per-node partials). Pure CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/routing.hpp"

namespace epc::bench {

// One rank's view of one point.
struct HtCapacityExpectation {
  int64_t arrived = 0;                 // out_num_recv: the rows that arrived, dropped ones included
  int64_t kept = 0;                    // min(arrived, capacity): the handle's rows (exact sizing)
  std::vector<int32_t> expert_counts;  // [local experts]: (token, entry) pairs of the kept rows
  std::vector<float> combined;         // [tokens]: combine's value for each of this rank's tokens
  int32_t overflow_rank = -1;          // the overflow this rank reports (-1: none)
  int64_t overflow_rows = 0;           // that rank's dropped rows
};

// `all[r]` is rank r's [tokens, topk] routing, experts / all.size() local experts per rank;
// `capacity` the rows every rank holds (0: no limit). Returns false with `error` when the model
// refuses the input.
bool expect_ht_capacity(const std::vector<Routing>& all, int rank, int tokens, int topk, int experts, int64_t capacity,
                        HtCapacityExpectation& out, std::string& error);

// Rows each rank drops at `capacity` into `dropped` ([ranks]; all 0 when capacity is 0 or holds
// every row). Returns false with `error` when the model refuses the input.
bool ht_dropped_rows(const std::vector<Routing>& all, int tokens, int topk, int experts, int64_t capacity,
                     std::vector<int64_t>& dropped, std::string& error);

}  // namespace epc::bench
