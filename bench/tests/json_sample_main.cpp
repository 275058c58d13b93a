// SPDX-License-Identifier: Apache-2.0
// Writes bench/samples/format_sample.json: the JSON format filled with INVENTED numbers, so
// that plot.py and readers of bench/JSON.md have a file to work with before any GPU run. The
// byte counts are computed from real routing; every time is made up by a formula below and
// the file says so (format_sample: true, a note, and "format sample" as machine names).
// `--ht` writes a high-throughput record instead (bench/samples/format_sample_ht.json);
// `--table` prints the table view of the record instead of its JSON; `--virtual-node-size=N`
// makes it a run with virtual nodes of N of the 4 ranks (not a committed sample: check_sample.py
// feeds it to the reader, and it shows the table's network bytes).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench/report.hpp"
#include "bench/routing.hpp"
#include "bench/traffic.hpp"

namespace {

using namespace epc::bench;

AcrossRanks invented(double median_us, int nranks) {
  AcrossRanks a;
  a.slowest.p10_us = median_us * 0.95;
  a.slowest.median_us = median_us;
  a.slowest.p90_us = median_us * 1.1;
  a.slowest.samples = 200;
  a.slowest.mean_us = median_us * 1.02;
  a.slowest_rank = nranks - 1;
  for (int r = 0; r < nranks; ++r) a.per_rank_median_us.push_back(median_us * (0.97 + 0.01 * r));
  return a;
}

using Invented = std::vector<std::pair<const char*, double>>;

// LL: 1..256 tokens per rank, times that grow slowly with the tokens.
Invented ll_times(double t) {
  const double d = 15 + 0.8 * t, c = 18 + 0.9 * t;    // invented
  const double bd = 60 + 2.0 * t, bc = 40 + 1.8 * t;  // invented
  const double cd = 6 + 0.25 * t, cc = 6 + 0.2 * t;   // invented
  return {
      {"ours.kernel.dispatch", d},       {"ours.kernel.combine", c},          {"ours.kernel.step", d + c},
      {"ours.api.dispatch", d + 12},     {"ours.api.combine", c + 12},        {"ours.api.step", d + c + 24},
      {"ours.api.dispatch_call", 6},     {"ours.api.combine_call", 5},        {"baseline.kernel.dispatch", bd},
      {"baseline.kernel.combine", bc},   {"baseline.kernel.step", bd + bc},   {"baseline.api.dispatch", bd + 10},
      {"baseline.api.combine", bc + 10}, {"baseline.api.step", bd + bc + 20}, {"baseline.api.dispatch_call", bd + 4},
      {"baseline.api.combine_call", 8},  {"ceiling.kernel.dispatch", cd},     {"ceiling.kernel.combine", cc},
      {"ceiling.kernel.step", cd + cc},  {"ours.cupti.dispatch", d - 4},      {"ours.cupti.combine", c - 4},
      {"ours.cupti.step", d + c - 7}};
}

// HT: 1024..16384 tokens per rank, times roughly linear in the bytes.
Invented ht_times(double t) {
  const double d = 40 + 0.16 * t, c = 45 + 0.17 * t;     // invented
  const double bd = 300 + 0.3 * t, bc = 150 + 0.25 * t;  // invented
  const double cd = 15 + 0.13 * t, cc = 15 + 0.13 * t;   // invented
  const double sd = 20 + 0.16 * t, sc = 20 + 0.16 * t;   // invented
  return {{"ours.kernel.layout", 60 + 0.004 * t},
          {"ours.api.layout", 180 + 0.006 * t},
          {"ours.kernel.dispatch", d},
          {"ours.kernel.combine", c},
          {"ours.kernel.step", d + c},
          {"ours.api.dispatch", d + 15},
          {"ours.api.combine", c + 15},
          {"ours.api.step", d + c + 30},
          {"ours.api.dispatch_call", 7},
          {"ours.api.combine_call", 6},
          {"ours.graph.step", d + c - 8},
          {"baseline.kernel.dispatch", bd},
          {"baseline.kernel.combine", bc},
          {"baseline.kernel.step", bd + bc},
          {"baseline.api.dispatch", bd + 10},
          {"baseline.api.combine", bc + 10},
          {"baseline.api.step", bd + bc + 20},
          {"baseline.api.dispatch_call", bd + 4},
          {"baseline.api.combine_call", 12},
          {"ceiling.kernel.dispatch", cd},
          {"ceiling.kernel.combine", cc},
          {"ceiling.kernel.step", cd + cc},
          {"ceiling_budget.kernel.dispatch", sd},
          {"ceiling_budget.kernel.combine", sc},
          {"ceiling_budget.kernel.step", sd + sc},
          {"ours.cupti.dispatch", d - 5},
          {"ours.cupti.combine", c - 5},
          {"ours.cupti.step", d + c - 9},
          {"ours.cupti_graph.step", d + c - 10}};
}

}  // namespace

int main(int argc, char** argv) {
  bool table = false, ht = false;
  int node_size = 0;
  constexpr const char kNodes[] = "--virtual-node-size=";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--table") == 0) {
      table = true;
    } else if (std::strcmp(argv[i], "--ht") == 0) {
      ht = true;
    } else if (std::strncmp(argv[i], kNodes, sizeof kNodes - 1) == 0 &&
               (node_size = std::atoi(argv[i] + sizeof kNodes - 1)) > 0 && 4 % node_size == 0) {
      continue;
    } else {
      std::fprintf(stderr, "usage: bench-json-sample [--ht] [--table] [--virtual-node-size=1|2|4]\n");
      return 2;
    }
  }
  RunRecord run;
  run.format_sample = true;
  run.complete = true;
  run.created_utc = "1970-01-01T00:00:00Z";
  run.nranks = 4;
  if (ht) {
    run.command =
        "epcomm-bench --mode=ht --tokens=1024..16384 --warmup=5 --iters=30 --large-from=8192 "
        "--graph --out=format_sample_ht.json (format sample, not run)";
    run.options.mode = "ht";
    run.options.warmup = 5;
    run.options.iters = 30;
    run.options.graph = true;
    run.options.tokens = {1024, 2048, 4096, 8192, 16384};
    run.options.large_from = 8192;
    run.options.out = "format_sample_ht.json";
  } else {
    run.command = "epcomm-bench --tokens=1..256 --out=format_sample.json (format sample, not run)";
    run.options.tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    run.options.out = "format_sample.json";
  }
  const int R = run.nranks;
  run.options.virtual_node_size = node_size;
  if (node_size > 0)
    run.command.insert(run.command.find(" --out="), " --virtual-node-size=" + std::to_string(node_size));
  run.group.num_nodes = static_cast<uint32_t>(node_size > 0 ? R / node_size : 1);
  for (int r = 0; r < R; ++r) run.machine.gpus.push_back(GpuInfo{r, r, "format sample (no GPU)", "none"});
  run.machine.hostname = "format-sample";
  run.machine.nccl_runtime = run.machine.nccl_headers = "0.0.0";
  run.machine.nccl_library = run.machine.cuda_driver = run.machine.cuda_runtime = "none";
  run.machine.nvidia_driver = "none";
  run.machine.epcomm_abi = "1.0.0";
  run.machine.epcomm_commit = "0123456789ab";
  run.cupti.active = true;
  run.cupti.library = "libcupti.so.13 (format sample, not loaded)";
  const int max_tokens = run.options.largest_tokens();
  run.group.workspace_bytes = 256;
  run.group.local_experts = 64;
  run.group.max_tokens = static_cast<uint32_t>(max_tokens);
  if (ht) {
    run.group.symmetric_bytes = 1946157056;
    run.group.planned_symmetric_bytes = 1946157056;
    run.group.num_sms = 24;
    run.group.recv_capacity = static_cast<uint64_t>(R) * static_cast<uint64_t>(max_tokens);  // the default, R * T
    run.wire = WireFormat::for_ht(run.options.hidden, false, run.options.topk);
  } else {
    run.group.symmetric_bytes = 58982400;
    run.group.planned_symmetric_bytes = 58982400;
    run.group.num_sms = 32;
    run.wire = WireFormat::for_dtype(run.options.hidden, false, run.options.topk);
  }
  run.group.message_bytes = static_cast<uint32_t>(run.wire.net_dispatch_message_bytes);  // the planner's
  CeilingPeak peak;
  peak.bytes_per_peer = 32 << 20;
  peak.peers = R - 1;
  peak.time = invented(300.0, R);
  run.ceiling_peak = peak;
  run.memory_copy = MemoryCopy{int64_t{256} << 20, invented(180.0, R)};
  if (!ht) {
    run.floor = LatencyFloor{static_cast<int>(run.group.num_sms),
                             512,
                             invented(2.5, R),
                             invented(5.5, R),
                             invented(3.5, R),
                             invented(2.0, R),
                             invented(4.0, R)};
  }

  for (int tokens : run.options.tokens) {
    PointResult p;
    p.tokens = tokens;
    p.warmup = run.options.warmup_at(tokens);
    p.iters = run.options.iters_at(tokens);
    p.output_checked = true;
    const std::vector<Routing> all =
        make_all_routing(run.options.routing, R, tokens, run.options.topk, run.options.experts);
    for (int r = 0; r < R; ++r) {
      p.traffic.push_back(compute_traffic(all, r, tokens, run.options.topk, run.options.experts, run.wire,
                                          static_cast<int64_t>(R) * max_tokens, node_size));
    }
    for (const auto& [name, us] : ht ? ht_times(tokens) : ll_times(tokens)) {
      p.metrics.push_back(Metric{name, invented(us, R)});
    }
    run.points.push_back(p);
  }
  const std::string text = table ? to_table(run) : to_json(run);
  std::fputs(text.c_str(), stdout);
  return 0;
}
