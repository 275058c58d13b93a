// SPDX-License-Identifier: Apache-2.0
#include "bench/options.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "kernels/wire/limits.hpp"

namespace epc::bench {
namespace {

// Limits the library enforces too; checked here so a typo fails before any GPU work.
using kernels::kMaxTopk;

using Setter = std::function<bool(const std::string& value, Options& o, std::string& error)>;

struct Flag {
  const char* name;   // "--hidden"
  const char* value;  // "N", or nullptr for on/off switches
  const char* help;
  Setter set;
};

bool to_int(const std::string& text, long min, long max, int& out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max) return false;
  out = static_cast<int>(v);
  return true;
}

bool to_fraction(const std::string& text, double min, double max, bool max_open, double& out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v) || v < min || v > max) return false;
  if (max_open && v >= max) return false;
  out = v;
  return true;
}

bool to_switch(const std::string& text, bool& out) {
  if (text.empty() || text == "on" || text == "1" || text == "true") {
    out = true;
    return true;
  }
  if (text == "off" || text == "0" || text == "false") {
    out = false;
    return true;
  }
  return false;
}

Setter int_flag(int Options::* field, long min, long max) {
  return [field, min, max](const std::string& v, Options& o, std::string& error) {
    if (to_int(v, min, max, o.*field)) return true;
    error = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    return false;
  };
}

Setter switch_flag(bool Options::* field) {
  return [field](const std::string& v, Options& o, std::string& error) {
    if (to_switch(v, o.*field)) return true;
    error = "on or off";
    return false;
  };
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {"--mode", "ll|ht",
       "ll: low-latency dispatch/combine (decode; epc_dispatch, epc_combine on an LL group). ht: "
       "high-throughput (prefill and training; epc_handle_create, epc_dispatch, epc_combine on an "
       "HT group): each point "
       "creates a handle (the layout step, timed separately), then times dispatch and combine; "
       "the baseline and the ceiling move HT's traffic (each token once per destination rank). "
       "Default ll.",
       [](const std::string& v, Options& o, std::string& e) {
         if (v == "ll" || v == "ht") {
           o.mode = v;
           return true;
         }
         e = "ll or ht";
         return false;
       }},
      {"--tokens", "LIST",
       "tokens per rank, one measured point each: N, A,B,C, or A..B (A, 2A, 4A, ... up to B, and B "
       "itself). Default 128. LL allows 1..1024, HT 1..65536.",
       [](const std::string& v, Options& o, std::string& e) { return parse_token_list(v, o.tokens, e); }},
      {"--max-tokens", "N",
       "the group's max_tokens_per_rank (buffer size; a real engine sizes it for its largest "
       "batch; HT's window grows with it: about 2 GB per GPU for 16384 tokens of hidden 7168 on 4 "
       "ranks). Default: the largest --tokens value.",
       int_flag(&Options::max_tokens, 1, kMaxHtTokens)},
      {"--ht-sizing", "exact|capacity",
       "HT: how each point's handle sizes its received rows (EpcHandleConfig.sizing). exact: rows = N, the "
       "tokens this rank receives (creating the handle synchronises once). capacity: rows = ranks "
       "x max tokens, no host synchronisation; the layout is also timed through epc_handle_update "
       "(the graph-safe per-step call). Default exact.",
       [](const std::string& v, Options& o, std::string& e) {
         if (v == "exact" || v == "capacity") {
           o.ht_sizing = v;
           return true;
         }
         e = "exact or capacity";
         return false;
       }},
      {"--layout", "expert-padded|rank-major|flat|expert-packed",
       "What dispatch writes (EpcHandleConfig.layout). LL: expert-padded (default; one zone of R x T rows "
       "per local expert, combine weighted on the expert's rank), rank-major (one zone of T rows per "
       "source rank) or flat (received tokens back to back), the last two with each row's top-k ids "
       "and weights and combine summing the rows as given. HT: flat (default; one row per (token, "
       "receiving rank)) or expert-packed (one row per (token, local entry), grouped by local expert in "
       "zones aligned to --alignment; combine then sums a token's rows on each rank first, "
       "EPC_WEIGHTING_NONE here).",
       [](const std::string& v, Options& o, std::string& e) {
         if (v == "expert-padded" || v == "rank-major" || v == "flat" || v == "expert-packed") {
           o.layout = v;
           return true;
         }
         e = "expert-padded, rank-major, flat or expert-packed";
         return false;
       }},
      {"--alignment", "N", "HT expert-packed: zone alignment in rows (0 means 1). Default 0.",
       int_flag(&Options::alignment, 0, 1 << 20)},
      {"--weights-at", "none|dispatch|combine",
       "HT expert-packed and LL expert-padded: where combine's top-k weights (1/topk) come from. none: rows "
       "summed as given (EPC_WEIGHTING_NONE; LL expert-padded: as dispatch). dispatch: dispatch's topk_weights, "
       "applied on the expert's rank, which returns one row per (token, rank) (EPC_WEIGHTING_SENDER). combine: "
       "given at combine and applied on the token's rank, to which every (token, entry) row returns "
       "(EPC_WEIGHTING_HOME; the group gets EPC_GROUP_COMBINE_PER_ENTRY, a combine window of max_topk rows per "
       "token). Default none.",
       [](const std::string& v, Options& o, std::string& e) {
         if (v == "none" || v == "dispatch" || v == "combine") {
           o.weights_at = v;
           return true;
         }
         e = "none or dispatch or combine";
         return false;
       }},
      {"--capacity-factor", "F",
       "HT: the group's receive window (EpcGroupConfig.recv_capacity) as a fraction F in (0, 1] of R x T rows "
       "(ranks x max tokens), rounded up: a rank keeps its first ceil(F x R x T) rows in (source rank, source "
       "token) order; the rest overflow (--overflow). Served on flat layouts, on one node and across nodes "
       "(--virtual-node-size included). Default 1: R x T, "
       "the library's default, which never overflows.",
       [](const std::string& v, Options& o, std::string& e) {
         double f = 0.0;
         if (to_fraction(v, 0.0, 1.0, false, f) && f > 0.0) {
           o.capacity_factor = f;
           return true;
         }
         e = "a number in (0, 1]";
         return false;
       }},
      {"--overflow", "fail|drop",
       "HT: what a step does when more rows arrive than the window holds (EpcGroupConfig.overflow). fail "
       "(EPC_OVERFLOW_FAIL): the step does nothing and the library returns EPC_ERR_CAPACITY; the bench then "
       "checks the overflow the handle reports against the reference model and stops without times. drop "
       "(EPC_OVERFLOW_DROP): rows past the window are dropped, and the outputs are checked against the "
       "reference model's DROP result. Default fail.",
       [](const std::string& v, Options& o, std::string& e) {
         if (v == "fail" || v == "drop") {
           o.overflow = v;
           return true;
         }
         e = "fail or drop";
         return false;
       }},
      {"--hidden", "N", "channels per token; a multiple of 8 (fp8: of 128). Default 7168.",
       int_flag(&Options::hidden, 8, 1 << 20)},
      {"--topk", "N", "experts per token (1..32). Default 8.", int_flag(&Options::topk, 1, kMaxTopk)},
      {"--experts", "N", "experts in total, divisible by the rank count. Default 256.",
       int_flag(&Options::experts, 1, 1 << 20)},
      {"--dtype", "bf16|fp8",
       "token payload of dispatch (combine is always bf16). LL fp8 casts in the kernel "
       "(EPC_QUANT_FP8); HT fp8 (EPC_QUANT_PASSTHROUGH) sends caller-quantized e4m3 rows with [tokens, "
       "hidden/128] fp32 scales, filled once (no quantization is timed). Default bf16.",
       [](const std::string& v, Options& o, std::string& e) {
         if (v == "bf16" || v == "fp8") {
           o.dtype = v;
           return true;
         }
         e = "bf16 or fp8";
         return false;
       }},
      {"--quant", "none|fp8|passthrough",
       "EpcDispatchArgs.quant. none: the --dtype payload. fp8 (LL): the cast in the send kernel, the same as "
       "--dtype=fp8. passthrough (HT and LL, every layout): caller-quantized --payload rows with --scale-count "
       "scales of --scales per row, filled once and copied byte for byte (needs --dtype=bf16; LL: row and scales "
       "within 2 * hidden bytes, the LL message). Default none.",
       [](const std::string& v, Options& o, std::string& e) {
         if (v == "none" || v == "fp8" || v == "passthrough") {
           o.quant = v;
           if (v == "fp8") o.dtype = "fp8";
           return true;
         }
         e = "none or fp8 or passthrough";
         return false;
       }},
      {"--payload", "e4m3|e2m1",
       "Passthrough: x as fp8 e4m3 [tokens, hidden] (hidden a multiple of 16) or fp4 e2m1x2 [tokens, hidden/2] "
       "(hidden a multiple of 32; LL also passes NVFP4's x_global_scale). Default e4m3.",
       [](const std::string& v, Options& o, std::string& e) {
         if (v == "e4m3" || v == "e2m1") {
           o.payload = v;
           return true;
         }
         e = "e4m3 or e2m1";
         return false;
       }},
      {"--scales", "fp32|fp32-colmajor|bf16|ue8m0|ue8m0-packed|ue8m0-packed-rowmajor|uint8",
       "Passthrough: the scales' dtype (FP32, BF16, E8M0, E8M0X4 (four per 32-bit word), UINT8; LL: fp32-colmajor "
       "and ue8m0-packed out_scales column-major over rows with 16-byte columns, the others row-major). LL fp8: "
       "out_scales as fp32 (row-major), fp32-colmajor (column-major over rows, 16-byte columns), ue8m0 (E8M0 "
       "bytes, row-major), ue8m0-packed (E8M0X4, column-major, 16-byte columns) or ue8m0-packed-rowmajor (E8M0X4, "
       "row-major). Default fp32.",
       [](const std::string& v, Options& o, std::string& e) {
         if (v == "fp32" || v == "fp32-colmajor" || v == "bf16" || v == "ue8m0" || v == "ue8m0-packed" ||
             v == "ue8m0-packed-rowmajor" || v == "uint8") {
           o.scales = v;
           return true;
         }
         e = "fp32 or fp32-colmajor or bf16 or ue8m0 or ue8m0-packed or ue8m0-packed-rowmajor or uint8";
         return false;
       }},
      {"--scale-count", "S",
       "Passthrough: scales per row; 0: hidden/128 (fp32, bf16, ue8m0-packed words), hidden/32 (ue8m0), "
       "hidden/16 (uint8). HT: the window grows past 2 * hidden when row and scales need it. Default 0.",
       int_flag(&Options::scale_count, 0, 1 << 20)},
      {"--fp8-pow2-scales", nullptr,
       "LL fp8: round scales to powers of two (HT fp8 scales are the caller's). Default off.",
       switch_flag(&Options::pow2_scales)},
      {"--sms", "N",
       "SM budget of our kernels (EpcGroupConfig.num_sms); 0: the library default (LL 132, HT 24). "
       "When the budget is below the GPU's SM count the ceiling is also measured with that many "
       "blocks (ceiling_budget).",
       int_flag(&Options::sms, 0, 1024)},
      {"--virtual-node-size", "N",
       "split the NVLink team into virtual nodes of N consecutive ranks (EpcGroupConfig."
       "virtual_node_size; rank r is in node r / N): our dispatch and combine then reach "
       "ranks of other nodes only through the network transport (on one host an NVLink-backed "
       "stand-in that stages the bytes and copies them on commit), and the JSON splits the wire "
       "bytes into NVLink and network. N must divide the rank count. The baseline (NCCL) and the "
       "ceiling (LSA copy) are unaffected: they always move their bytes over NVLink. Default 0: "
       "off, a node is the whole NVLink team.",
       int_flag(&Options::virtual_node_size, 0, 65536)},
      {"--routing", "uniform|skewed",
       "uniform: each token picks top-k distinct experts uniformly at random. skewed: each token "
       "also picks the hot expert with probability --hot-share. Default uniform.",
       [](const std::string& v, Options& o, std::string& e) {
         if (v == "uniform") {
           o.routing.kind = RoutingKind::uniform;
           return true;
         }
         if (v == "skewed") {
           o.routing.kind = RoutingKind::skewed;
           return true;
         }
         e = "uniform or skewed";
         return false;
       }},
      {"--hot-share", "F", "skewed: probability in [0, 1] that a token's top-k contains the hot expert. Default 0.5.",
       [](const std::string& v, Options& o, std::string& e) {
         if (to_fraction(v, 0.0, 1.0, false, o.routing.hot_share)) return true;
         e = "a number in [0, 1]";
         return false;
       }},
      {"--hot-expert", "N", "skewed: the hot expert's id. Default 0.",
       [](const std::string& v, Options& o, std::string& e) {
         if (to_int(v, 0, 1 << 20, o.routing.hot_expert)) return true;
         e = "a non-negative integer";
         return false;
       }},
      {"--masked", "F", "probability in [0, 1) that a top-k entry is masked (-1), for any routing. Default 0.",
       [](const std::string& v, Options& o, std::string& e) {
         if (to_fraction(v, 0.0, 1.0, true, o.routing.masked)) return true;
         e = "a number in [0, 1)";
         return false;
       }},
      {"--seed", "N", "routing seed; every rank derives its own stream from it. Default 1.",
       [](const std::string& v, Options& o, std::string& e) {
         int s = 0;
         if (to_int(v, 0, 2147483647L, s)) {
           o.routing.seed = static_cast<uint64_t>(s);
           return true;
         }
         e = "a non-negative integer";
         return false;
       }},
      {"--warmup", "N", "untimed steps before each measurement. Default 20.", int_flag(&Options::warmup, 0, 1000000)},
      {"--iters", "N", "timed steps per measurement (the statistics' sample). Default 200.",
       int_flag(&Options::iters, 1, 1000000)},
      {"--large-from", "N",
       "points with at least N tokens per rank use --large-warmup and --large-iters instead (an HT "
       "step of 16384 tokens moves about 1 GB per GPU). Default 0: no point is large.",
       int_flag(&Options::large_from, 0, kMaxHtTokens)},
      {"--large-warmup", "N", "untimed steps before each measurement of a large point. Default 3.",
       int_flag(&Options::large_warmup, 0, 1000000)},
      {"--large-iters", "N", "timed steps per measurement of a large point. Default 10.",
       int_flag(&Options::large_iters, 1, 1000000)},
      {"--graph", nullptr,
       "also capture --iters steps of ours (dispatch + combine; for HT the handle is created "
       "before the capture, in either sizing) in a CUDA graph and time its replays (per step). "
       "Default off.",
       switch_flag(&Options::graph)},
      {"--graph-replays", "N", "timed replays of the captured graph. Default 5.",
       int_flag(&Options::graph_replays, 1, 10000)},
      {"--step-bound", nullptr,
       "LL: pass each point's tokens as EpcDispatchArgs.max_step_tokens (every rank dispatches that "
       "many), so that a one-node step of few tokens moves as line records (docs/tuning.md, \"Line "
       "steps\"). Default off: 0, the group's max tokens.",
       switch_flag(&Options::step_bound)},
      {"--send-only", nullptr,
       "run our dispatch and combine as EPC_STEP_SEND_ONLY + epc_complete on one stream and "
       "time both halves (HT: groups of one node, so not with --virtual-node-size below the "
       "rank count). Default off.",
       switch_flag(&Options::send_only)},
      {"--micro-batches", "N",
       "LL: 2 also times one layer of two micro-batches (dispatch, stand-in expert GEMM, combine "
       "each), serial on one stream and overlapped as vLLM's dual-batch overlap does (send-only "
       "halves, the GEMM on a second stream), in the same run (bench/micro_batch_timing.hpp). "
       "Default 1: off.",
       int_flag(&Options::micro_batches, 1, 2)},
      {"--gemm-us", "N", "--micro-batches=2: the stand-in GEMM's length in microseconds. Default 50.",
       int_flag(&Options::gemm_us, 0, 1000000)},
      {"--gemm-sms", "N",
       "--micro-batches=2: SMs the stand-in GEMM holds (one block each, all of the SM's shared "
       "memory). Default 0: every SM.",
       int_flag(&Options::gemm_sms, 0, 1024)},
      {"--baseline", nullptr,
       "measure the NCCL host-API baseline at every point (count exchange, host sync, pack "
       "kernel, grouped ncclSend/ncclRecv, and back; bench/JSON.md). Default on.",
       switch_flag(&Options::baseline)},
      {"--ceiling", nullptr,
       "measure the LSA peer-store copy ceiling (peak, and the same bytes as ours at every "
       "point with every SM, and with our SM budget when that is below the GPU's SM count). "
       "Default on.",
       switch_flag(&Options::ceiling)},
      {"--cupti", nullptr,
       "also time our kernels themselves from CUPTI's activity records (loaded at run time: "
       "libcupti.so.13, libcupti.so, then beside the bench and in the CUDA toolkit it was built "
       "with), in passes of their own: per call and per step the span from the first kernel's start "
       "to the last kernel's end (the \"cupti\" columns, comparable with peers' kernel durations), "
       "in eager steps and graph replays, and for LL the floor (an empty kernel on our grid). Where "
       "CUPTI cannot be loaded the run says why and shows \"-\". Default on.",
       switch_flag(&Options::cupti)},
      {"--cold-l2", nullptr,
       "before every dispatch of ours that the kernel, CUPTI and graph timings run, and before "
       "the LL floor's kernels, overwrite four times the GPU's L2 (a memset, in no kernel span), so "
       "that each step finds its code, routing and rows in HBM, as it may inside a model whose "
       "other kernels sweep the L2 between steps. The API timing, the baseline and the ceiling stay "
       "warm, and the graph's event figure (which would count the sweeps) is left out. Default off: "
       "back-to-back steps, as peers' benchmarks run them.",
       switch_flag(&Options::cold_l2)},
      {"--ceiling-mib", "N", "MiB per peer for the peak-bandwidth ceiling. Default 32.",
       int_flag(&Options::ceiling_peak_mib, 1, 4096)},
      {"--timeout-ms", "N", "bound on every device-side wait of the group; 0: library default.",
       int_flag(&Options::timeout_ms, 0, 3600000)},
      {"--out", "PATH", "write the JSON record (bench/JSON.md) to PATH, rewritten after every point.",
       [](const std::string& v, Options& o, std::string& e) {
         if (v.empty()) {
           e = "a file path";
           return false;
         }
         o.out = v;
         return true;
       }},
  };
  return table;
}

constexpr const char* kLauncherFlags[] = {"--ranks=", "--time-limit=", "--fail-grace=", "--allow-oversubscribe"};

bool is_launcher_flag(const std::string& arg) {
  for (const char* f : kLauncherFlags) {
    const size_t n = std::strlen(f);
    if (f[n - 1] == '=' ? arg.compare(0, n, f) == 0 : arg == f) return true;
  }
  return false;
}

// Help paragraphs wrapped at 90 columns under a 6-space indent.
std::string wrapped(const std::string& text) {
  constexpr size_t kWidth = 90;
  const std::string indent = "      ";
  std::string out = indent, word;
  size_t column = indent.size();
  auto flush = [&] {
    if (word.empty()) return;
    if (column > indent.size() && column + 1 + word.size() > kWidth) {
      out += "\n" + indent;
      column = indent.size();
    } else if (column > indent.size()) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    word.clear();
  };
  for (char c : text) {
    if (c == ' ') {
      flush();
    } else {
      word += c;
    }
  }
  flush();
  return out + "\n";
}

bool validate(const Options& o, std::string& error) {
  const int largest = o.largest_tokens();
  if (o.max_tokens > 0 && o.max_tokens < largest) {
    error = "--max-tokens=" + std::to_string(o.max_tokens) + " is smaller than the largest " + "--tokens value " +
            std::to_string(largest);
    return false;
  }
  if (o.topk > o.experts) {
    error = "--topk=" + std::to_string(o.topk) + " exceeds --experts=" + std::to_string(o.experts);
    return false;
  }
  if (o.hidden % 8 != 0) {
    error = "--hidden=" + std::to_string(o.hidden) +
            " is not a multiple of 8 (rows move in 16-byte "
            "vectors)";
    return false;
  }
  if (o.dtype == "fp8" && o.hidden % 128 != 0) {
    error = "--dtype=fp8 needs --hidden to be a multiple of 128 (one scale per 128 channels)";
    return false;
  }
  const bool ht = o.mode == "ht";
  if (o.quant == "fp8" && (ht || o.dtype != "fp8")) {
    error = ht ? "--quant=fp8 (the cast in the send kernel) serves --mode=ll; HT takes caller-quantized rows: "
                 "--quant=passthrough"
               : "--quant=fp8 is the cast of --dtype=fp8; drop --dtype=" + o.dtype;
    return false;
  }
  if (o.quant == "passthrough") {
    if (o.dtype != "bf16") {
      error = "--quant=passthrough needs --dtype=bf16 (the payload is --payload)";
      return false;
    }
    if (o.hidden % (o.payload == "e2m1" ? 32 : 16) != 0) {
      error = "--payload=" + o.payload + " needs --hidden to be a multiple of " + (o.payload == "e2m1" ? "32" : "16");
      return false;
    }
    const int64_t bytes = o.passthrough_row_bytes() + o.passthrough_scale_count() * o.passthrough_scale_element_bytes();
    if (!ht && bytes > 2 * int64_t{o.hidden}) {
      error = "--quant=passthrough with --mode=ll: a row and its scales (" + std::to_string(bytes) +
              " bytes) exceed the 2 * hidden bytes of an LL message (--scale-count)";
      return false;
    }
  }
  if (ht ? o.layout != "flat" && o.layout != "expert-packed"
         : o.layout != "expert-padded" && o.layout != "rank-major" && o.layout != "flat") {
    error = "--layout=" + o.layout + " with --mode=" + o.mode + ": " +
            (ht ? "HT serves flat and expert-packed" : "LL serves expert-padded, rank-major and flat");
    return false;
  }
  if (!ht && o.quant != "passthrough" && o.scales != "fp32" &&
      (o.dtype != "fp8" || (o.scales != "fp32-colmajor" && o.scales != "ue8m0" && o.scales != "ue8m0-packed" &&
                            o.scales != "ue8m0-packed-rowmajor"))) {
    error = "--scales=" + o.scales +
            " with --mode=ll: the fp8 cast's out_scales are fp32, fp32-colmajor, ue8m0, ue8m0-packed or "
            "ue8m0-packed-rowmajor, with --dtype=fp8";
    return false;
  }
  if ((ht || o.quant == "passthrough") && o.scales == "ue8m0-packed-rowmajor") {
    error =
        "--scales=ue8m0-packed-rowmajor is an LL fp8 out_scales layout; passthrough E8M0X4 scales are "
        "--scales=ue8m0-packed";
    return false;
  }
  if (ht && o.scales == "fp32-colmajor") {
    error = "--scales=fp32-colmajor is an LL fp8 out_scales layout; HT passthrough scales are row-major";
    return false;
  }
  if (o.weights_at != "none" && (ht ? o.layout != "expert-packed" : o.layout != "expert-padded")) {
    error = "--weights-at=" + o.weights_at +
            " weights the rows of an expert layout: use --mode=ht with --layout=expert-packed, or --mode=ll with "
            "--layout=expert-padded";
    return false;
  }
  if (!ht && (o.capacity_factor != 1.0 || o.overflow != "fail")) {
    error = std::string(o.capacity_factor != 1.0 ? "--capacity-factor" : "--overflow=" + o.overflow) +
            " sizes the high-throughput receive window: use --mode=ht (an LL window holds R x T rows by "
            "construction)";
    return false;
  }
  if (ht && o.capacity_factor < 1.0 && o.layout != "flat") {
    error =
        "--capacity-factor below 1 serves --layout=flat (the library refuses a smaller window with " + o.layout + ")";
    return false;
  }
  const int mode_max = ht ? kMaxHtTokens : kMaxLlTokens;
  if (largest > mode_max || o.max_tokens > mode_max) {
    error = std::string(o.max_tokens > mode_max ? "--max-tokens" : "--tokens") + ": --mode=" + o.mode +
            " allows at most " + std::to_string(mode_max) + " tokens per rank";
    return false;
  }
  if (ht && o.micro_batches > 1) {
    error = "--micro-batches=2 times low-latency micro-batches (send-only halves): use --mode=ll";
    return false;
  }
  if (ht && o.pow2_scales) {
    error =
        "--fp8-pow2-scales does not apply to --mode=ht: HT fp8 takes the caller's e4m3 rows "
        "and scales unchanged (the benchmark fills them once)";
    return false;
  }
  if (o.routing.kind == RoutingKind::skewed && o.routing.hot_expert >= o.experts) {
    error =
        "--hot-expert=" + std::to_string(o.routing.hot_expert) + " is not below --experts=" + std::to_string(o.experts);
    return false;
  }
  return true;
}

}  // namespace

bool check_virtual_node_size(const Options& o, int nranks, std::string& error) {
  const int n = o.virtual_node_size;
  if (o.mode == "ht" && o.send_only && n != 0 && n < nranks) {
    error = "--send-only with --mode=ht needs one node, and --virtual-node-size=" + std::to_string(n) + " splits the " +
            std::to_string(nranks) + " ranks into " + std::to_string(nranks / n) +
            " (high-throughput steps across nodes need the fused launch)";
    return false;
  }
  if (n == 0 || (nranks > 0 && n <= nranks && nranks % n == 0)) return true;
  error = "--virtual-node-size=" + std::to_string(n) + " does not divide the rank count " + std::to_string(nranks) +
          ": virtual nodes hold the same number of consecutive ranks (use a "
          "divisor of " +
          std::to_string(nranks) + ", or 0 for no virtual nodes)";
  return false;
}

int64_t ht_recv_capacity(const Options& o, int nranks) {
  const int64_t worst = static_cast<int64_t>(nranks) * o.group_max_tokens();
  if (o.capacity_factor >= 1.0) return worst;
  // The product of a decimal fraction and an integer can land a hair above the integer it
  // names (0.3 x 10): such a hair does not round up.
  const double rows = std::ceil(o.capacity_factor * static_cast<double>(worst) * (1.0 - 1e-12));
  return std::clamp<int64_t>(static_cast<int64_t>(rows), 1, worst);
}

int Options::largest_tokens() const { return tokens.empty() ? 0 : *std::max_element(tokens.begin(), tokens.end()); }

bool parse_token_list(const std::string& text, std::vector<int>& out, std::string& error) {
  std::vector<int> list;
  const size_t dots = text.find("..");
  if (dots != std::string::npos) {
    int first = 0, last = 0;
    if (!to_int(text.substr(0, dots), 1, kMaxHtTokens, first) ||
        !to_int(text.substr(dots + 2), 1, kMaxHtTokens, last) || last < first) {
      error = "A..B with 1 <= A <= B <= " + std::to_string(kMaxHtTokens);
      return false;
    }
    for (int t = first; t < last; t *= 2) list.push_back(t);
    list.push_back(last);
  } else {
    size_t start = 0;
    while (true) {
      const size_t comma = text.find(',', start);
      int t = 0;
      if (!to_int(text.substr(start, comma - start), 1, kMaxHtTokens, t)) {
        error = "N, A,B,C or A..B with values in [1, " + std::to_string(kMaxHtTokens) + "]";
        return false;
      }
      list.push_back(t);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  out = list;
  return true;
}

bool parse_options(int argc, char* const* argv, Options& out, std::string& error) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      continue;
    }
    if (is_launcher_flag(arg)) continue;
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? std::string() : arg.substr(eq + 1);
    const Flag* flag = nullptr;
    for (const Flag& f : flags()) {
      if (name == f.name) flag = &f;
    }
    if (flag == nullptr) {
      error = "unknown argument '" + arg + "' (see --help)";
      return false;
    }
    if (flag->value != nullptr && eq == std::string::npos) {
      error = std::string(flag->name) + " needs a value: " + flag->name + "=" + flag->value;
      return false;
    }
    std::string expected;
    if (!flag->set(value, o, expected)) {
      error = std::string(flag->name) + ": expected " + expected + ", got '" + value + "'";
      return false;
    }
  }
  if (o.layout == "default") o.layout = o.mode == "ht" ? "flat" : "expert-padded";
  if (!o.help && !validate(o, error)) return false;
  out = o;
  return true;
}

std::string usage() {
  std::string text =
      "usage: epcomm-bench [flags]\n"
      "\n"
      "Measures epcomm's dispatch and combine on every local GPU (one process per GPU), and in\n"
      "the same run, on the same routing, the NCCL host-API baseline and the LSA copy ceiling.\n"
      "Prints a table on stdout (progress on stderr) and writes JSON with --out. What every\n"
      "number means: bench/JSON.md.\n"
      "\n"
      "Benchmark flags (--flag=VALUE; on/off switches also accept a bare --flag):\n";
  for (const Flag& f : flags()) {
    std::string head = "  " + std::string(f.name) + (f.value ? "=" + std::string(f.value) : "[=on|off]");
    text += head + "\n" + wrapped(f.help);
  }
  text +=
      "  --help, -h\n      print this text and exit.\n"
      "\n"
      "Launcher flags (read by the multi-process launcher, tests/harness):\n"
      "  --ranks=N\n      processes (GPUs) to start; default: every visible GPU.\n"
      "  --time-limit=SECONDS\n      stop every rank after this long; default 300, 0: none.\n"
      "  --fail-grace=SECONDS\n      how long other ranks may run on after one failed; default 30.\n"
      "  --allow-oversubscribe\n      let ranks share GPUs (for debugging only; times are "
      "meaningless).\n"
      "\n"
      "Exit status: 0 all points measured; 1 a failure (no GPU, an unsupported mode or dtype,\n"
      "a rank failed); 2 bad flags.\n";
  return text;
}

std::vector<std::string> flag_names() {
  std::vector<std::string> names;
  for (const Flag& f : flags()) names.emplace_back(f.name);
  return names;
}

std::string joined_command(int argc, char* const* argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) s += ' ';
    s += argv[i];
  }
  return s;
}

int64_t Options::passthrough_row_bytes() const { return payload == "e2m1" ? hidden / 2 : hidden; }

int64_t Options::passthrough_scale_count() const {
  if (scale_count > 0) return scale_count;
  const int64_t per = scales == "ue8m0" ? hidden / 32 : scales == "uint8" ? hidden / 16 : hidden / 128;
  return per > 0 ? per : 1;
}

int Options::passthrough_scale_element_bytes() const {
  return scales == "bf16" ? 2 : scales == "ue8m0" || scales == "uint8" ? 1 : 4;
}

}  // namespace epc::bench
