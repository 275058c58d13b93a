// SPDX-License-Identifier: Apache-2.0
// The benchmark's flags: one table drives parsing, validation and --help, so a flag cannot
// exist without being documented. Pure CPU (unit-tested without a GPU).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/wire/limits.hpp"

namespace epc::bench {

enum class RoutingKind { uniform, skewed };

struct RoutingSpec {
  RoutingKind kind = RoutingKind::uniform;
  int hot_expert = 0;
  double hot_share = 0.5;  // skewed: probability that a token picks the hot expert
  double masked = 0.0;     // probability that an entry is -1
  uint64_t seed = 1;
};

struct Options {
  std::string mode = "ll";          // ll | ht
  std::vector<int> tokens{128};     // tokens per rank, one point each
  int max_tokens = 0;               // the group's max_tokens_per_rank; 0: largest of `tokens`
  std::string ht_sizing = "exact";  // ht: exact | capacity (EpcHandleConfig.sizing of each point's handle)
  std::string layout = "default";   // EpcHandleConfig.layout: ll: expert-padded (default) |
                                    // rank-major | flat; ht: flat (default) | expert-packed
  int alignment = 0;                // ht expert-packed: EpcHandleConfig.expert_alignment (0 means 1)
  // ht expert-packed: where combine's top-k weights come from. none: rows summed as given
  // (EPC_WEIGHTING_NONE); dispatch: dispatch's topk_weights on the expert's rank
  // (EPC_WEIGHTING_SENDER); combine: home_topk_weights on the token's rank (EPC_WEIGHTING_HOME,
  // on a group with EPC_GROUP_COMBINE_PER_ENTRY).
  std::string weights_at = "none";
  // ht: the group's receive window (EpcGroupConfig.recv_capacity) as a fraction of R * T rows,
  // rounded up (ht_recv_capacity); 1: the library's default R * T, which never overflows.
  double capacity_factor = 1.0;
  std::string overflow = "fail";  // ht: fail | drop (EpcGroupConfig.overflow)
  int hidden = 7168;
  int topk = 8;
  int experts = 256;
  std::string dtype = "bf16";  // bf16 | fp8
  bool pow2_scales = false;    // fp8: power-of-two scales
  // LL: each point's tokens as EpcDispatchArgs.max_step_tokens (every rank sends that many),
  // so that one-node steps of few tokens move as line records.
  bool step_bound = false;
  // EpcDispatchArgs.quant: none (the --dtype payload), fp8 (LL: the cast in the send kernel,
  // the same as --dtype=fp8, which it sets) or passthrough (both modes): caller-quantized
  // --payload rows with --scale-count scales of --scales per row (0: the format's usual count).
  std::string quant = "none";    // none | fp8 | passthrough
  std::string payload = "e4m3";  // e4m3 | e2m1
  std::string scales = "fp32";   // fp32 | fp32-colmajor (LL) | bf16 | ue8m0 | ue8m0-packed |
                                 // ue8m0-packed-rowmajor (LL fp8) | uint8
  int scale_count = 0;
  // --quant=passthrough: bytes of one x row (--payload), the scales per row after the default
  // (--scale-count 0: hidden/128 for fp32, bf16 and ue8m0-packed words, hidden/32 for ue8m0,
  // hidden/16 for uint8) and the bytes of one scale element (--scales).
  int64_t passthrough_row_bytes() const;
  int64_t passthrough_scale_count() const;
  int passthrough_scale_element_bytes() const;
  int sms = 0;  // SM budget of our kernels; 0: the library's default
  // EpcGroupConfig.virtual_node_size of our groups: 0 off; else the NVLink team is
  // split into nodes of this many consecutive ranks that reach each other only through the
  // network transport. Must divide the rank count (check_virtual_node_size).
  int virtual_node_size = 0;
  RoutingSpec routing;
  int warmup = 20;
  int iters = 200;
  // Points with at least `large_from` tokens per rank (0: none) use the large_* counts, so
  // one sweep can span microsecond and millisecond steps.
  int large_from = 0;
  int large_warmup = 3;
  int large_iters = 10;
  bool graph = false;
  int graph_replays = 5;
  bool send_only = false;
  // LL: 2 also times a layer of two micro-batches, serial and overlapped
  // (bench/micro_batch_timing.hpp), with a stand-in GEMM of gemm_us on gemm_sms SMs (0: all).
  int micro_batches = 1;
  int gemm_us = 50;
  int gemm_sms = 0;
  bool baseline = true;
  bool ceiling = true;
  int ceiling_peak_mib = 32;  // per peer, for the peak-bandwidth ceiling
  bool cupti = true;          // kernel spans from CUPTI's activity records, where CUPTI loads
  bool cold_l2 = false;       // sweep the L2 before every timed step of ours (bench/l2_sweep.hpp)
  int timeout_ms = 0;         // group's device wait bound; 0: library default
  std::string out;            // JSON path; empty: none
  bool help = false;

  int largest_tokens() const;
  int group_max_tokens() const { return max_tokens > 0 ? max_tokens : largest_tokens(); }
  bool is_large(int point_tokens) const { return large_from > 0 && point_tokens >= large_from; }
  int warmup_at(int point_tokens) const { return is_large(point_tokens) ? large_warmup : warmup; }
  int iters_at(int point_tokens) const { return is_large(point_tokens) ? large_iters : iters; }
};

// Parses argv (argv[0] is skipped). The harness's launcher flags (--ranks=, --time-limit=,
// --fail-grace=, --allow-oversubscribe) are accepted and ignored here. Returns false with
// `error` naming the flag when a flag is unknown, malformed or out of range.
bool parse_options(int argc, char* const* argv, Options& out, std::string& error);

// The rank count is known only once the launcher (or a rank) knows the world size: --ranks,
// EPC_TEST_RANKS, the visible GPUs, or EPC_WORLD_SIZE. Returns false with `error` naming the
// flag unless --virtual-node-size is 0 or divides `nranks` (and leaves one node where a
// flag needs it: HT --send-only, --capacity-factor below 1).
bool check_virtual_node_size(const Options& options, int nranks, std::string& error);

// HT: the rows the group's receive window holds on `nranks` ranks, ceil(capacity_factor * R *
// T) (at least 1; R * T at factor 1, the library's default).
int64_t ht_recv_capacity(const Options& options, int nranks);

// Tokens per rank a mode accepts (the library's limits, checked early).
using kernels::kMaxHtTokens;
using kernels::kMaxLlTokens;

// "1..256" (doubling from the first to the second), "1,2,8" or "64"; values up to
// kMaxHtTokens (the per-mode limit is checked after every flag is read).
bool parse_token_list(const std::string& text, std::vector<int>& out, std::string& error);

// The --help text, generated from the same table the parser uses.
std::string usage();

// The names of every flag the parser knows ("--mode", ...), for tests.
std::vector<std::string> flag_names();

// The command line as one string, for the JSON record.
std::string joined_command(int argc, char* const* argv);

}  // namespace epc::bench
