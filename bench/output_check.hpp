// SPDX-License-Identifier: Apache-2.0
// What dispatch and combine must produce in the benchmark's set-up, so a run that measured
// wrong results says so instead of reporting their times. Expert outputs are all bf16 1.0
// and every weight is 1/K; then (LL) a token's combined row is, in every channel, the sum
// over the ranks hosting its entries of bf16(entries on that rank / K), rounded to bf16; in
// HT, where the caller weights before combine, the number of ranks hosting its entries.
// LL passthrough rows must hold their source token's bytes, at the rows the reference model
// gives. Pure CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/routing.hpp"

namespace epc::bench {

float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);  // round to nearest even

// Expected combined value of every token of one rank ([tokens]), for `local_experts`
// experts per rank. `per_rank_partials`: ours pre-reduces per rank and rounds each partial
// to bf16; the baseline sums all K weighted rows in fp32 at once.
std::vector<float> expected_combine(const Routing& routing, int tokens, int topk, int local_experts, int nranks,
                                    bool per_rank_partials);

// HT: the rows dispatch delivered come back as bf16 1.0 (the caller's already weighted
// expert outputs), so a token's combined value is the number of ranks that received it.
std::vector<float> expected_ht_combine(const Routing& routing, int tokens, int topk, int local_experts, int nranks);

// Compares a [tokens, hidden] bf16 output with the expected value per token, allowing one
// bf16 rounding step (2^-7 relative). Returns false with `error` naming the first mismatch.
bool check_combined(const std::vector<uint16_t>& out, int tokens, int hidden, const std::vector<float>& expected,
                    std::string& error);

// Compares per-expert counts. Returns false with `error` naming the first mismatch.
bool check_counts(const std::vector<int32_t>& got, const std::vector<int32_t>& expected, std::string& error);

// ---- LL passthrough (--quant=passthrough --mode=ll) ----------------------------------------
// The bench fills x and x_scales once with these bytes, so every received row names its
// source: byte b of token t's row of rank r, and byte b of its scales.
uint8_t passthrough_row_byte(int rank, int token, int64_t b);
uint8_t passthrough_scale_byte(int rank, int token, int64_t b);

// Where an LL dispatch puts the rows it receives: out_x [L, R*T, .] (expert-padded), [R, T, .]
// (rank-major) or [R*T, .] (flat).
enum class LlRows { kExpertPadded, kRankMajor, kFlat };
struct RowSource {
  int32_t rank = -1;  // -1: no row arrives here
  int32_t token = -1;
};

// Per out_x row of `rank`, the source token the reference model (tests/reference:
// ll_dispatch, ll_dispatch_tokens) puts there, when every rank has `tokens` tokens routed by
// `all` (rank r's at index r) and the group `max_tokens` per rank. Returns false with `error`
// when the model refuses the input.
bool ll_row_sources(const std::vector<Routing>& all, int rank, int tokens, int topk, int experts, int max_tokens,
                    LlRows rows, std::vector<RowSource>& out, std::string& error);

// Checks received passthrough rows: row i of `x` (row_bytes each) and of `scales` (scale_bytes
// each, gathered from out_scales' strides) hold its source's bytes wherever sources[i] names
// one; other rows are not looked at. Returns false with `error` naming the first mismatch.
bool check_passthrough_rows(const std::vector<RowSource>& sources, const std::vector<uint8_t>& x, int64_t row_bytes,
                            const std::vector<uint8_t>& scales, int64_t scale_bytes, std::string& error);

}  // namespace epc::bench
