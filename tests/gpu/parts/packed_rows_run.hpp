// SPDX-License-Identifier: Apache-2.0
// packed_row_of (kernels/ht/ht_packed_rows.cuh) run on one GPU without NCCL: blocks that load
// their own rows' zone shifts as an EXPERT_PACKED dispatch block does (load_packed_own_shifts),
// then find the row of every entry place given, searched or from a known local expert.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace epc::gputest::parts {

struct PackedRowQuery {
  int32_t source;
  int32_t place;    // among the source's entries for this rank
  int32_t known_l;  // the entry's local expert where the caller knows it, else -1
};

struct PackedRowsInput {
  int ranks = 1;
  int rank = 0;
  int local_experts = 1;
  std::vector<int32_t> source_starts;  // [ranks][local_experts + 1], as the layout writes it
  std::vector<int32_t> expert_base;    // [ranks][local_experts]
  std::vector<PackedRowQuery> queries;
  int blocks = 2;
};

struct PackedRowsResult {
  std::string cuda_error;         // empty when every CUDA call succeeded
  bool shifts_in_shared = false;  // own rows from the block's shared copy
  std::vector<int32_t> rows;      // one per query
};

PackedRowsResult run_packed_rows(const PackedRowsInput& input);

}  // namespace epc::gputest::parts
