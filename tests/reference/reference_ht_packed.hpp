// SPDX-License-Identifier: Apache-2.0
// The HT EXPERT_PACKED layout in the reference model (beside reference.hpp, whose
// conventions hold here: entries, bf16(), "acc + w * y", validation by std::invalid_argument).
//
// ht_dispatch_packed, per receiving rank q, with alignment a (0 means 1):
//   counts[l]   the entries (r, t, k) with topk_idx[r][t][k] == q*L + l (duplicates count once
//               per entry), as HtDispatchResult::expert_counts;
//   offsets     [L + 1]: offsets[0] = 0, offsets[l + 1] = offsets[l] + a * ceil(counts[l] / a),
//               so every zone starts and ends at a multiple of a; rows = offsets[L];
//   row offsets[l] + i, i < counts[l]: the i-th entry of expert l in (r, t, k) order; it holds
//               the source token's payload bytes and scale bytes exactly (16-bit bits, the
//               caller's fp8 bytes and fp32 scales, or a passthrough row and its scales as
//               reference.hpp's "Passthrough" says), its weight topk_weights[r][t][k] and the
//               SourceRef {r, t, k, weight};
//   padding     rows offsets[l] + counts[l] .. offsets[l + 1] - 1: all-zero payload, scales and
//               weight, SourceRef {-1, -1, -1, 0}. Kernels write these zeros only with
//               EPC_HANDLE_ZERO_PADDING (else they leave the rows untouched); rows at or past
//               offsets[L] belong to no zone and are never written.
//   num_recv    the entries received: the sum of counts (padding excluded).
//
// ht_combine_packed: y_per_rank[q] is bf16 [rows_q, H] in that layout. For source rank r and
// token t, with w_k = topk_weights[r][t][k] (weighted) or 1 (unweighted, the rows as given):
//   acc = 0; for each rank d ascending hosting an unmasked entry of t: partial = 0; for k
//   ascending with entry k on d: partial = partial + w_k * float(y_row(r, t, k)[c]);
//   acc = acc + float(bf16(partial)); out[t][c] = bf16(acc)
// (the contract of ll_combine's kPerRankPrereduce: one bf16 partial per (token, rank)). With
// backward weights g_per_rank[q] float [rows_q], out_topk_weights[r][t][k] is g at entry
// (r, t, k)'s row (0 where masked).
// Across nodes (node_size ranks per node, as ht_combine's "Across nodes" in reference.hpp),
// the partials P_d = bf16(partial of d) are summed as ht_combine sums rows:
//   acc = 0; for each node n ascending: if n is r's node, for each d in n ascending with a
//   partial: acc = acc + float(P_d); else, if some d in n has one: node = 0; for each such d
//   ascending: node = node + float(P_d); acc = acc + float(bf16(node)).   out = bf16(acc).
// With one node, or nodes of one rank, this is the order above.
#pragma once

#include <cstdint>
#include <vector>

#include "tests/reference/reference.hpp"

namespace epc::ref {

struct HtPackedOptions {
  HtPayload payload = HtPayload::k16Bit;
  int alignment = 0;              // 0 means 1
  PassthroughFormat passthrough;  // with HtPayload::kPassthrough
};

struct HtPackedResult {
  int rows = 0;                         // offsets[L]
  int num_recv = 0;                     // entries received (padding excluded)
  int row_bytes = 0;                    // payload bytes per row: 2 * H (16-bit), H (fp8), or
                                        // passthrough_row_bytes
  int scale_bytes = 0;                  // scale bytes per row: 0 (16-bit), 4 * H / 128 (fp8), or
                                        // passthrough_scale_bytes
  std::vector<uint8_t> payload;         // [rows, row_bytes]
  std::vector<uint8_t> scales;          // [rows, scale_bytes]
  std::vector<float> weights;           // [rows]
  std::vector<int32_t> expert_counts;   // [L]
  std::vector<int64_t> expert_offsets;  // [L + 1]
  std::vector<SourceRef> src;           // [rows]
};

// Rows a zone of `count` entries takes at alignment `alignment` (0 means 1).
int64_t ht_packed_zone_rows(int64_t count, int64_t alignment);
// The most rows `entries` received entries can take over `zones` zones at `alignment`
// (the default capacity of an EXPERT_PACKED handle: entries = recv_capacity * max_topk).
int64_t ht_packed_worst_rows(int64_t entries, int64_t zones, int64_t alignment);

std::vector<HtPackedResult> ht_dispatch_packed(const Problem& problem, const HtPackedOptions& options = {});

// y_per_rank[q]: bf16 [rows_q, H]; g_per_rank: empty or, per q, float [rows_q]; node_size: 0
// (one node) or ranks per node.
HtCombineResult ht_combine_packed(const Problem& problem, const std::vector<std::vector<uint16_t>>& y_per_rank,
                                  bool weighted, int alignment = 0,
                                  const std::vector<std::vector<float>>& g_per_rank = {}, int node_size = 0);

// home_weights: per source rank r, float [B_r, K]; the rest as ht_combine_packed.
HtCombineResult ht_combine_packed_home(const Problem& problem, const std::vector<std::vector<uint16_t>>& y_per_rank,
                                       const std::vector<std::vector<float>>& home_weights, int alignment = 0,
                                       const std::vector<std::vector<float>>& g_per_rank = {});

}  // namespace epc::ref
