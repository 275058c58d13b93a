// SPDX-License-Identifier: Apache-2.0
// The CPU reference model of expert-parallel dispatch and combine.
//
// This header IS the specification of what the GPU kernels must produce: every output below
// is defined exactly (order, counts, padding, bit patterns, the order of every float
// operation), and GPU tests compare kernel output with this model bit for bit. The model runs
// over ALL ranks' inputs at once, in plain C++ (no CUDA), deterministically.
//
// ---- Notation --------------------------------------------------------------------------
//   R = nranks, E = num_experts, L = E / R local experts per rank, H = hidden, K = topk,
//   T = max_tokens per rank, B_r = ranks[r].num_tokens <= T.
//   Expert e lives on rank e / L and has local id e % L there.
//   An "entry" is one (source rank r, token t, top-k slot k); it is masked when
//   topk_idx[r][t][k] == -1. Duplicate expert ids within one token's row are allowed and each
//   entry is treated independently (a token choosing expert 5 twice is received twice by
//   expert 5 in LL and counted twice in HT expert_counts).
//   bf16(v) means float_to_bf16 (round to nearest even); float(b) means the exact widening.
//   All float accumulations start at +0.0f and add terms one at a time in the stated order;
//   "acc + w * y" means add_rounded_product(acc, w, y): the product is rounded to float
//   first, then added (no FMA). Kernels: -fmad=false, or __fmul_rn / __fadd_rn.
//   Because accumulators start at +0.0f, a sum whose terms are all -0.0 is +0.0.
//
// ---- Low-Latency (LL) mode -------------------------------------------------------------
// ll_dispatch, per receiving rank q: expert-major buffers [L, R*T, ...]. For local expert l
// (global expert q*L + l) the rows are packed from row 0 and hold every entry (r, t, k) with
// topk_idx[r][t][k] == q*L + l, ordered by (r ascending, t ascending, k ascending);
// counts[l] is their number. Each row carries the source token's payload:
//   16-bit: the token's bits copied exactly (dtype bf16 or fp16, as given);
//   fp8:    quantize_row_fp8(float(x[r][t]), ...) of the SOURCE token (numeric.hpp): e4m3
//           bytes [H] and float scales [H/128]; the same bytes for every entry of the token;
//   passthrough: the source token's x_quant row and x_scale_bytes, copied byte for byte
//           (see "Passthrough" below; the same bytes for every entry of the token).
// and a SourceRef {r, t, k, topk_weights[r][t][k]}. Rows at or past counts[l] are all-zero
// here with SourceRef {-1, -1, -1, 0.0f}; kernels may leave them unspecified, and tests
// compare only the first counts[l] rows. If some expert would receive more than R*T rows
// (only possible with duplicate ids) the buffer cannot hold them: std::invalid_argument.
//
// ll_combine: y_per_rank[q] is bf16 [L, R*T, H] in the dispatch layout (only the first
// counts[l] rows of each expert are read). y_row(r,t,k) is the row that ll_dispatch put entry
// (r, t, k) into, w_k = topk_weights[r][t][k]. Output per source rank r: bf16 [B_r, H]:
//   kTopkOrder:        acc = 0; for k = 0..K-1 unmasked: acc = acc + w_k * float(y_row[c]);
//                      out[t][c] = bf16(acc).
//   kPerRankPrereduce: acc = 0; for each destination rank d ascending that hosts at least one
//                      unmasked entry of t: partial = 0; for k ascending with entry k on d:
//                      partial = partial + w_k * float(y_row[c]); acc = acc +
//                      float(bf16(partial)) (the partial crosses the wire as bf16);
//                      out[t][c] = bf16(acc).
// A token whose entries are all masked gives +0.0 (0x0000) everywhere in both orders.
// Combine data is always bf16 (Problem::dtype describes only the dispatch input).
//
// ll_combine_home (EPC_WEIGHTING_HOME): every entry's row y_row(r,t,k) returns unweighted
// and the token's rank weights it by home_weights[r][t][k] (dispatch's topk_weights play no
// part): acc = 0; for k = 0..K-1 unmasked: acc = acc + h_k * float(y_row[c]);
// out[t][c] = bf16(acc). That is kTopkOrder with h in place of w, and HT's
// ht_combine_packed_home over the LL rows; no partial is formed, so duplicate expert ids
// and entries of one rank add one by one in slot order.
//
// ---- High-Throughput (HT) mode ---------------------------------------------------------
// ht_dispatch, per receiving rank q: token (r, t) is received ONCE if at least one of its
// unmasked entries has its expert on q. Received rows are ordered by (r ascending, t
// ascending); num_recv = N. Per received row i:
//   x [N, H]: the token's 16-bit bits, or (HtPayload::kFp8) the caller's x_fp8 [H] bytes and
//             fp8_scales [H/128], copied unchanged, or (HtPayload::kPassthrough) the caller's
//             x_quant row and x_scale_bytes, copied byte for byte (see "Passthrough" below);
//   recv_topk_idx [N, K] int32: e - q*L where entry k's expert e is on q, else -1;
//   recv_topk_weights [N, K] float: topk_weights[r][t][k] where local, else 0.0f;
//   src [N]: {r, t}.
// expert_counts[L]: number of (received token, entry) pairs per local expert (a duplicate
// entry counts twice); tokens_from_rank[R]: rows received from each source rank.
//
// Receive capacity (HtDispatchOptions::capacity = C > 0, the rows every rank holds; 0: no
// limit): rank q keeps its rows 0 .. C-1 in the order above, i.e. the lowest (source rank,
// source token) first, and drops the rest. num_recv stays N, the rows that arrived; rows =
// min(N, C) is what x, recv_topk_*, src hold; expert_counts and tokens_from_rank count the
// kept rows only; dropped = N - rows. A dropped row is absent from combine: its rank adds no
// term for that token (HtLayout::token_row is -1 there). That is EPC_OVERFLOW_DROP. Under
// EPC_OVERFLOW_FAIL a step in which any rank overflows does nothing on any rank, and every
// rank reports the same overflow (ht_overflow_seen_by): itself if its receive overflowed,
// else the lowest rank whose receive did, with that rank's dropped rows.
//
// ht_combine: x_per_rank[q] is bf16 [N_q, H], already weighted/reduced by the caller, in
// ht_dispatch's row order. Output per source rank r: bf16 [B_r, H]:
//   acc = 0; for each destination rank d ascending that received (r, t):
//   acc = acc + float(x_per_rank[d][row of (r,t) on d][c]); out[t][c] = bf16(acc).
// Tokens sent nowhere give +0.0. Optional backward weights: w_per_rank[q] float [N_q, K];
// output w_out [B_r, K] with w_out[t][k] = w_per_rank[d][row of (r,t) on d][k] where d is
// the rank of entry k's expert, and 0.0f where entry k is masked.
//
// Across nodes (node_size ranks per node, node of rank q = q / node_size), combine reduces
// inside each node first and crosses between nodes once per (token, node). The order is:
//   acc = 0; for each node n ascending: if n is the source's node, for each d in n ascending
//   that received (r, t): acc = acc + float(x_d); else, if any rank of n received (r, t):
//   partial = 0; for each such d ascending: partial = partial + float(x_d);
//   acc = acc + float(bf16(partial)).   out[t][c] = bf16(acc).
// With one node, or nodes of one rank (a partial of one bf16 term is that term), this is
// the order above; with larger nodes the rounding can differ from it. The kernels follow
// it on groups split into nodes (EpcGroupConfig.virtual_node_size, or several NVLink
// domains).
//
// ---- Combine output dtypes (both modes) ------------------------------------------------
// Every combine above ends in out[t][c] = bf16(acc) of one fp32 accumulator acc. Combine may
// write its output as fp16 or fp32 instead; it is then the same acc, rounded once:
//   bf16: float_to_bf16(acc);   fp16: float_to_fp16(acc) (round to nearest even; overflow
//   gives +-inf, as __float2half_rn);   fp32: acc itself, unrounded.
// ll_combine_sums and HtCombineResult::sums give acc; round_sums gives the 16-bit outputs.
//
// ---- Global expert ids and counts across steps (HT) -------------------------------------
// With HtDispatchOptions::global_expert_ids, recv_topk_idx holds the global id q*L + local
// id instead of the local id (masked entries stay -1). Per-expert counts accumulated over
// steps are the plain int64 sums of each step's counts (LL: counts, HT: expert_counts).
//
// ---- Backward pass ---------------------------------------------------------------------
// The gradient of a dispatch is a combine over the same routing (the same Problem): HT
// dispatch's gradient is ht_combine of the row gradients (an unweighted sum over destination
// ranks); LL dispatch's gradient is ll_combine with all weights 1.0 (set topk_weights so).
// The gradient of a combine is a dispatch of the output gradient: put it in RankTokens::x
// and call ht_dispatch / ll_dispatch on the same routing. No extra functions are needed.
//
// ---- Passthrough (EPC_QUANT_PASSTHROUGH) ----------------------------------------------
// A caller-quantized payload: per token, a row of row_bytes and S scales of scale_bytes
// bytes in all, whose bits the library never reads. Row: e4m3 H bytes (H % 16 == 0: rows
// move in 16-byte vectors) or e2m1 two per byte, low nibble first, H / 2 bytes (H % 32 ==
// 0). Scales: S >= 1 elements of fp32 (4 bytes), bf16 (2), e8m0 (1: a biased exponent,
// 2^(e - 127)), e8m0x4 (4: four e8m0, lowest byte first) or uint8 (1); scale_bytes = S *
// size. Each received row (HT flat and the LL token layouts: one per (token, rank); HT packed
// and LL expert-padded: one per entry) holds its source token's row_bytes and scale_bytes
// exactly; nothing else is written for them. Rows, order and the other outputs are those
// of the 16-bit dispatch of the same routing.
//
// ---- Input validation ------------------------------------------------------------------
// Every function validates its inputs and throws std::invalid_argument naming the offending
// field: nranks < 1, num_experts < 1, E % R != 0, H == 0, H % 8 != 0, K == 0 or K > 32,
// max_tokens < 0, ranks.size() != R, B_r < 0 or B_r > T, array sizes that do not match the
// shapes above, topk_idx outside [-1, E), fp8 (LL or HT) with H % 128 != 0.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/wire/limits.hpp"
#include "tests/reference/numeric.hpp"

namespace epc::ref {

// The largest top-k the model (and the kernels) accept.
using kernels::kMaxTopk;

// One rank's dispatch input. Row-major arrays; which payload is needed depends on the call.
struct RankTokens {
  int num_tokens = 0;                  // B_r
  std::vector<uint16_t> x;             // [B_r, H] bits of Problem::dtype (LL, HT 16-bit)
  std::vector<int64_t> topk_idx;       // [B_r, K] expert ids, -1 = masked entry
  std::vector<float> topk_weights;     // [B_r, K]
  std::vector<uint8_t> x_fp8;          // [B_r, H] e4m3 (HT fp8 dispatch only)
  std::vector<float> fp8_scales;       // [B_r, H/128] (HT fp8 dispatch only)
  std::vector<uint8_t> x_quant;        // [B_r, row_bytes] (passthrough only)
  std::vector<uint8_t> x_scale_bytes;  // [B_r, scale_bytes] (passthrough only)
};

// ---- Passthrough formats ----------------------------------------------------------------
enum class QuantPayload { kE4m3, kE2m1 };
enum class ScaleDtype { kFp32, kBf16, kE8m0, kE8m0x4, kUint8 };

struct PassthroughFormat {
  QuantPayload payload = QuantPayload::kE4m3;
  ScaleDtype scales = ScaleDtype::kFp32;
  int scale_count = 0;  // S, elements per row (e8m0x4: 32-bit words)
};

int scale_dtype_bytes(ScaleDtype dtype);
// Bytes of one row's payload and of its scales; throw std::invalid_argument naming the
// hidden size or the scale count when the format cannot hold them.
int passthrough_row_bytes(int hidden, const PassthroughFormat& format);
int passthrough_scale_bytes(const PassthroughFormat& format);

// All ranks' inputs of one step.
struct Problem {
  int nranks = 0;
  int num_experts = 0;
  int hidden = 0;
  int topk = 0;
  int max_tokens = 0;
  Dtype dtype = Dtype::kBf16;
  std::vector<RankTokens> ranks;  // [nranks]

  int local_experts() const { return num_experts / nranks; }
  int rank_of_expert(int64_t expert) const { return static_cast<int>(expert / local_experts()); }
  int local_id_of_expert(int64_t expert) const { return static_cast<int>(expert % local_experts()); }
};

// Shapes and routing (everything except the payload arrays x / x_fp8 / fp8_scales).
void validate_problem(const Problem& problem);
// The payload checks below assume validate_problem has passed.
// The 16-bit payload: ranks[r].x has B_r * H elements.
void validate_x16_payload(const Problem& problem);
// The HT fp8 payload: H % 128 == 0, x_fp8 has B_r * H bytes, fp8_scales B_r * H/128.
void validate_fp8_payload(const Problem& problem);
// The passthrough payload: x_quant has B_r * row_bytes bytes, x_scale_bytes B_r * scale_bytes.
void validate_passthrough_payload(const Problem& problem, const PassthroughFormat& format);
// Copies token t's passthrough row (row_bytes) and scales (scale_bytes) of `rank` to
// `row_out` and `scales_out`, byte for byte.
void copy_passthrough_token(const RankTokens& rank, int t, std::size_t row_bytes, std::size_t scale_bytes,
                            uint8_t* row_out, uint8_t* scales_out);

// ---- Low-Latency mode -------------------------------------------------------------------

struct LlDispatchOptions {
  bool use_fp8 = false;            // quantize the payload to e4m3 + per-128-channel scales
  bool round_scale_ue8m0 = false;  // with use_fp8: scales rounded up to powers of two
  // RankTokens::x_quant + x_scale_bytes in `format`, copied byte for byte (see
  // "Passthrough"); excludes use_fp8.
  bool passthrough = false;
  PassthroughFormat format;
};

// Where one LL row came from; combine routes the row back with it.
struct SourceRef {
  int32_t src_rank = -1;
  int32_t src_token = -1;
  int32_t topk_slot = -1;
  float weight = 0.0f;
};

// What rank q holds after LL dispatch. Row (l, i) is at index l * rows_per_expert + i.
struct LlDispatchResult {
  int local_experts = 0;
  int rows_per_expert = 0;  // R * T
  int hidden = 0;
  bool is_fp8 = false;
  std::vector<int32_t> counts;    // [L]
  std::vector<uint16_t> x;        // [L, R*T, H] when !is_fp8, else empty
  std::vector<uint8_t> x_fp8;     // [L, R*T, H] when is_fp8, else empty
  std::vector<float> fp8_scales;  // [L, R*T, H/128] when is_fp8, else empty
  // With LlDispatchOptions::passthrough (x empty then): [L, R*T, row_bytes] and
  // [L, R*T, scale_bytes].
  std::vector<uint8_t> x_quant;
  std::vector<uint8_t> x_scale_bytes;
  std::vector<SourceRef> src;  // [L, R*T]

  std::size_t row_index(int local_expert, int row) const {
    return static_cast<std::size_t>(local_expert) * rows_per_expert + row;
  }
};

// The LL routing alone: where every entry lands. Shared by dispatch and combine, and useful
// to GPU tests that want to locate a row.
struct LlLayout {
  int rows_per_expert = 0;                      // R * T
  std::vector<std::vector<int32_t>> counts;     // [q][L]
  std::vector<std::vector<int32_t>> entry_row;  // [r][t * K + k]: row within the expert's
                                                // block on its rank; -1 if masked
};

LlLayout ll_layout(const Problem& problem);

// Source token `x_row` (problem.dtype) in e4m3 with one scale per 128 channels, as the sending
// rank's in-kernel cast makes it (quantize_row_fp8); `scratch` holds the row in float.
void quantize_source_token(const Problem& p, const uint16_t* x_row, bool round_scale_ue8m0, std::vector<float>& scratch,
                           uint8_t* q_out, float* scales_out);

// An LL dispatch's payload, the same in every LL layout: each received row holds its source
// token's 16-bit row, its fp8 cast (quantize_source_token) or the caller's passthrough bytes.
// Construction validates the payload (std::invalid_argument naming `who`); allocate sizes a
// result's payload arrays for `rows` rows (all zero); load takes one source token; store
// copies it into a result's row. Results are LlDispatchResult or LlTokenResult.
class LlSourcePayload {
 public:
  LlSourcePayload(const Problem& p, bool use_fp8, bool round_scale_ue8m0, bool passthrough,
                  const PassthroughFormat& format, const char* who);

  template <typename Result>
  void allocate(Result& out, std::size_t rows) const {
    if (use_fp8_) {
      out.x_fp8.assign(rows * hidden_, 0);
      out.fp8_scales.assign(rows * blocks_, 0.0f);
    } else if (passthrough_) {
      out.x_quant.assign(rows * row_bytes_, 0);
      out.x_scale_bytes.assign(rows * scale_bytes_, 0);
    } else {
      out.x.assign(rows * hidden_, 0);
    }
  }

  void load(const RankTokens& rank, int t);

  template <typename Result>
  void store(Result& out, std::size_t row) const {
    if (use_fp8_) {
      std::copy(fp8_.begin(), fp8_.end(), out.x_fp8.begin() + row * hidden_);
      std::copy(scales_.begin(), scales_.end(), out.fp8_scales.begin() + row * blocks_);
    } else if (passthrough_) {
      copy_passthrough_token(*rank_, t_, row_bytes_, scale_bytes_, out.x_quant.data() + row * row_bytes_,
                             out.x_scale_bytes.data() + row * scale_bytes_);
    } else {
      std::copy(x_row_, x_row_ + hidden_, out.x.begin() + row * hidden_);
    }
  }

 private:
  const Problem& p_;
  bool use_fp8_;
  bool round_scale_ue8m0_;
  bool passthrough_;
  std::size_t hidden_;
  std::size_t blocks_;       // fp8 scales per row
  std::size_t row_bytes_;    // passthrough
  std::size_t scale_bytes_;  // passthrough
  const RankTokens* rank_ = nullptr;
  int t_ = 0;
  const uint16_t* x_row_ = nullptr;
  std::vector<float> scratch_;
  std::vector<uint8_t> fp8_;
  std::vector<float> scales_;
};

// One result per receiving rank q (index q).
std::vector<LlDispatchResult> ll_dispatch(const Problem& problem, const LlDispatchOptions& options = {});

enum class CombineOrder { kTopkOrder, kPerRankPrereduce };

// y_per_rank[q]: bf16 [L, R*T, H]. Returns, per source rank r, bf16 [B_r, H].
std::vector<std::vector<uint16_t>> ll_combine(const Problem& problem,
                                              const std::vector<std::vector<uint16_t>>& y_per_rank, CombineOrder order);

// The same combine before its final rounding: per source rank r, the fp32 accumulators
// acc [B_r, H] (ll_combine is float_to_bf16 of each).
std::vector<std::vector<float>> ll_combine_sums(const Problem& problem,
                                                const std::vector<std::vector<uint16_t>>& y_per_rank,
                                                CombineOrder order);

// EPC_WEIGHTING_HOME: home_weights[r] is float [B_r, K]; the fp32 accumulators per source
// rank (ll_combine_home_sums) and them rounded to bf16 (ll_combine_home).
std::vector<std::vector<float>> ll_combine_home_sums(const Problem& problem,
                                                     const std::vector<std::vector<uint16_t>>& y_per_rank,
                                                     const std::vector<std::vector<float>>& home_weights);
std::vector<std::vector<uint16_t>> ll_combine_home(const Problem& problem,
                                                   const std::vector<std::vector<uint16_t>>& y_per_rank,
                                                   const std::vector<std::vector<float>>& home_weights);

// Combine accumulators rounded once to a 16-bit output dtype (float_to_bf16 or
// float_to_fp16 of each element).
std::vector<uint16_t> round_sums(const std::vector<float>& sums, Dtype dtype);

// ---- High-Throughput mode ---------------------------------------------------------------

enum class HtPayload {
  k16Bit,        // RankTokens::x in Problem::dtype
  kFp8,          // RankTokens::x_fp8 + fp8_scales, quantized by the caller, copied unchanged
  kPassthrough,  // RankTokens::x_quant + x_scale_bytes in HtDispatchOptions::passthrough
};

struct HtDispatchOptions {
  HtPayload payload = HtPayload::k16Bit;
  PassthroughFormat passthrough;   // with kPassthrough
  bool global_expert_ids = false;  // recv_topk_idx: q*L + local id instead of the local id
  int64_t capacity = 0;            // rows every rank holds (0: no limit); see "Receive capacity"
};

struct TokenRef {
  int32_t src_rank = -1;
  int32_t src_token = -1;
};

// What rank q holds after HT dispatch.
struct HtDispatchResult {
  int num_recv = 0;  // N, the rows that arrived (before any drop)
  int rows = 0;      // min(N, capacity): the rows held below
  int dropped = 0;   // N - rows
  bool is_fp8 = false;
  std::vector<uint16_t> x;                // [rows, H] when !is_fp8, else empty
  std::vector<uint8_t> x_fp8;             // [rows, H] when is_fp8, else empty
  std::vector<float> fp8_scales;          // [rows, H/128] when is_fp8, else empty
  std::vector<uint8_t> x_quant;           // [rows, row_bytes] with kPassthrough, else empty
  std::vector<uint8_t> x_scale_bytes;     // [rows, scale_bytes] with kPassthrough, else empty
  std::vector<int32_t> recv_topk_idx;     // [rows, K] local (or global) expert id or -1
  std::vector<float> recv_topk_weights;   // [rows, K] weight or 0.0f
  std::vector<int32_t> expert_counts;     // [L], of the rows held
  std::vector<int32_t> tokens_from_rank;  // [R], of the rows held
  std::vector<TokenRef> src;              // [rows]
};

// The HT routing alone: which row each token occupies on each destination rank.
struct HtLayout {
  std::vector<int32_t> num_recv;                // [q]: rows that arrived
  std::vector<int32_t> rows;                    // [q]: rows held (min(num_recv, capacity))
  std::vector<std::vector<int32_t>> token_row;  // [r][t * R + d]: row of (r, t) on rank d,
                                                // -1 if not sent there or dropped
};

// capacity: rows every rank holds, 0 for no limit ("Receive capacity" above).
HtLayout ht_layout(const Problem& problem, int64_t capacity = 0);

// The overflow rank q reports ("Receive capacity"): rank -1 and 0 rows for none.
struct HtOverflow {
  int32_t rank = -1;
  int64_t rows = 0;
};
HtOverflow ht_overflow_seen_by(const HtLayout& layout, int q);

// One result per receiving rank q (index q).
std::vector<HtDispatchResult> ht_dispatch(const Problem& problem, const HtDispatchOptions& options = {});

struct HtCombineResult {
  std::vector<std::vector<uint16_t>> x;          // per source rank r: bf16 [B_r, H]
  std::vector<std::vector<float>> sums;          // per r: fp32 [B_r, H], acc before rounding
  std::vector<std::vector<float>> topk_weights;  // per r: [B_r, K]; empty if not requested
};

// x_per_rank[q]: bf16 [rows_q, H]. topk_weights_per_rank: empty (no backward weights) or,
// per q, float [rows_q, K].
// node_size: 0 (one node) or ranks per node; see "Across nodes" above.
// capacity: as in HtDispatchOptions (dropped rows add no term).
HtCombineResult ht_combine(const Problem& problem, const std::vector<std::vector<uint16_t>>& x_per_rank,
                           const std::vector<std::vector<float>>& topk_weights_per_rank = {}, int node_size = 0,
                           int64_t capacity = 0);

}  // namespace epc::ref
