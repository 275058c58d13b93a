// SPDX-License-Identifier: Apache-2.0
// The LL token layouts RANK_MAJOR and FLAT in the reference model (beside reference.hpp,
// whose conventions hold here: entries, bf16(), validation by std::invalid_argument).
//
// ll_dispatch_tokens, per receiving rank q: token (r, t) is received ONCE if at least one of
// its unmasked entries has its expert on q (as HT FLAT: reference.hpp's ht_dispatch). Let
// place(r, t) be the number of tokens t' < t of rank r received by q, and n_r their number
// (rank_counts[r]). The received row of (r, t) is
//   kRankMajor: r * T + place(r, t)             (out_x [R, T, H]: zone r holds rank r's tokens
//                                                back to back, in source-token order)
//   kFlat:      n_0 + ... + n_{r-1} + place(r, t)  (out_x [R * T, H]: rows ordered by
//                                                (source rank, source token), HT FLAT's order)
// Each received row holds:
//   x:                 the source token's 16-bit bits, or (use_fp8) quantize_row_fp8 of the
//                      SOURCE token, as ll_dispatch (e4m3 [H], fp32 scales [H/128]), or
//                      (passthrough) its x_quant row and x_scale_bytes byte for byte;
//   recv_topk_idx[K]:  for slot k whose expert e is on q: e - q*L (global_expert_ids: e);
//                      every other slot (masked, or another rank's expert): -1;
//   recv_topk_weights[K]: topk_weights[r][t][k] where recv_topk_idx is not -1, else 0.0f;
//   src:               {r, t}.
// A token naming one expert twice is received once, with both slots set. Rows that receive
// no token (past a zone's count, or past num_recv) are not written by the kernels; here they
// are all zero with ids -1, weights 0 and src {-1, -1}, and `written` says which rows are.
// expert_counts[l]: received (token, entry) pairs of local expert l (a duplicate counts
// twice); rank_counts[r] = n_r; num_recv = the sum of rank_counts.
//
// ll_combine_tokens: x_per_rank[q] is bf16 [R * T, H] in q's layout, rows already weighted
// by the caller (EPC_WEIGHTING_NONE). Per source rank r, bf16 [B_r, H]:
//   acc = 0; for each rank d ascending that received (r, t): acc = acc + float(x_d[row][c]);
//   out[t][c] = bf16(acc)   (tokens sent nowhere: +0.0)
// which is reference.hpp's ht_combine on one node, row for row.
#pragma once

#include <cstdint>
#include <vector>

#include "tests/reference/reference.hpp"

namespace epc::ref {

enum class LlTokenLayout { kRankMajor, kFlat };

struct LlTokenOptions {
  LlTokenLayout layout = LlTokenLayout::kFlat;
  bool use_fp8 = false;            // quantize to e4m3 + per-128-channel scales
  bool round_scale_ue8m0 = false;  // with use_fp8: scales rounded up to powers of two
  bool global_expert_ids = false;  // recv_topk_idx: q*L + local id instead of the local id
  bool passthrough = false;        // RankTokens::x_quant + x_scale_bytes copied byte for byte
  PassthroughFormat format;        // with passthrough
};

// What rank q holds after an LL dispatch in a token layout. Row i is out_x's i-th row of
// R * T (rank-major: zone i / T, row i % T).
struct LlTokenResult {
  int rows = 0;  // R * T
  int num_recv = 0;
  bool is_fp8 = false;
  std::vector<uint8_t> written;          // [rows]: 1 where a token was received
  std::vector<uint16_t> x;               // [rows, H] when !is_fp8
  std::vector<uint8_t> x_fp8;            // [rows, H] when is_fp8
  std::vector<float> fp8_scales;         // [rows, H/128] when is_fp8
  std::vector<uint8_t> x_quant;          // [rows, row_bytes] with passthrough (x empty)
  std::vector<uint8_t> x_scale_bytes;    // [rows, scale_bytes] with passthrough
  std::vector<int32_t> recv_topk_idx;    // [rows, K]
  std::vector<float> recv_topk_weights;  // [rows, K]
  std::vector<int32_t> expert_counts;    // [L]
  std::vector<int32_t> rank_counts;      // [R]
  std::vector<TokenRef> src;             // [rows]
};

// token_row[r][t * R + d]: the row of (r, t) on rank d in `layout`, -1 where not sent.
std::vector<std::vector<int32_t>> ll_token_rows(const Problem& problem, LlTokenLayout layout);

std::vector<LlTokenResult> ll_dispatch_tokens(const Problem& problem, const LlTokenOptions& options = {});

// x_per_rank[q]: bf16 [R * T, H] in `layout`. Returns, per source rank r, the fp32
// accumulators [B_r, H]; ll_combine_tokens rounds them to bf16.
std::vector<std::vector<float>> ll_combine_tokens_sums(const Problem& problem,
                                                       const std::vector<std::vector<uint16_t>>& x_per_rank,
                                                       LlTokenLayout layout);
std::vector<std::vector<uint16_t>> ll_combine_tokens(const Problem& problem,
                                                     const std::vector<std::vector<uint16_t>>& x_per_rank,
                                                     LlTokenLayout layout);

}  // namespace epc::ref
