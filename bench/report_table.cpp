// SPDX-License-Identifier: Apache-2.0
// The human view: a header naming the configuration and the machine, a latency table and a
// bandwidth table, one row per point. Missing figures print as "-".
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "bench/report.hpp"

namespace epc::bench {
namespace {

std::string printf_string(const char* format, ...) {
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  return text;
}

std::string us(const PointResult& p, const std::string& name, bool with_range) {
  const AcrossRanks* m = p.find(name);
  if (m == nullptr) return "-";
  if (!with_range) return printf_string("%.1f", m->slowest.median_us);
  return printf_string("%.1f [%.1f-%.1f]", m->slowest.median_us, m->slowest.p10_us, m->slowest.p90_us);
}

// "12.3 (12.9)": the slowest rank's median and its mean.
std::string median_mean(const PointResult& p, const std::string& name) {
  const AcrossRanks* m = p.find(name);
  if (m == nullptr) return "-";
  return printf_string("%.1f (%.1f)", m->slowest.median_us, m->slowest.mean_us);
}

std::string num(double v, const char* format) { return std::isfinite(v) ? printf_string(format, v) : std::string("-"); }

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// "812 B", "14.4 kB", "236.0 MB", "1.20 GB" (powers of 10, like the bandwidths).
std::string bytes_text(double bytes) {
  if (!std::isfinite(bytes)) return "-";
  if (bytes < 1e3) return printf_string("%.0f B", bytes);
  if (bytes < 1e6) return printf_string("%.1f kB", bytes / 1e3);
  if (bytes < 1e9) return printf_string("%.1f MB", bytes / 1e6);
  return printf_string("%.2f GB", bytes / 1e9);
}

bool any_point_has(const RunRecord& run, const std::string& name) {
  for (const PointResult& p : run.points) {
    if (p.find(name) != nullptr) return true;
  }
  return false;
}

std::string header(const RunRecord& run) {
  const Options& o = run.options;
  std::string routing = o.routing.kind == RoutingKind::skewed
                            ? printf_string("skewed routing (hot expert %d in %.0f%% of tokens)", o.routing.hot_expert,
                                            100 * o.routing.hot_share)
                            : std::string("uniform routing");
  if (o.routing.masked > 0) routing += printf_string(", %.0f%% of entries masked", 100 * o.routing.masked);
  std::string s;
  if (run.format_sample) s += "FORMAT SAMPLE: invented numbers, not a measurement\n";
  const std::string mode = o.mode == "ll"   ? std::string("low-latency")
                           : o.mode == "ht" ? "high-throughput (" + o.ht_sizing + " sizing)"
                                            : o.mode;
  const std::string large =
      o.large_from > 0 ? printf_string(" (%d after %d from %d tokens)", o.large_iters, o.large_warmup, o.large_from)
                       : std::string();
  if (run.phase_trace) s += "PHASE TRACE BUILD (-Dphase_trace=true): the LL kernels stamp their phases\n";
  if (o.cold_l2) {
    s += "COLD L2 (--cold-l2): the L2 is overwritten before every step of ours in the kernel, cupti and graph "
         "timings and before the floor's kernels; the api timing, the baseline and the ceiling stay warm\n";
  }
  s += printf_string(
      "epcomm-bench %s: %d ranks, hidden %d, top-%d, %d experts, %s, %s, %u SMs, "
      "%d timed steps after %d warm-up%s%s%s\n",
      mode.c_str(), run.nranks, o.hidden, o.topk, o.experts, o.dtype.c_str(), routing.c_str(), run.group.num_sms,
      o.iters, o.warmup, large.c_str(), o.send_only ? ", send-only + complete" : "", o.graph ? ", graph replay" : "");
  if (o.virtual_node_size > 0) {
    const unsigned nodes = run.group.num_nodes > 0 ? run.group.num_nodes : 1;
    s += printf_string(
        "virtual nodes: %u nodes of %d ranks (rank r in node r / %d); ours reaches other "
        "nodes only through the network transport; the baseline and the ceiling use "
        "NVLink throughout\n",
        nodes, o.virtual_node_size, o.virtual_node_size);
  }
  if (o.mode == "ht") {
    const int64_t worst = static_cast<int64_t>(run.nranks) * run.group.max_tokens;
    s += printf_string(
        "receive window: %llu rows per rank (capacity factor %g of ranks x max tokens = %lld), overflow %s%s\n",
        static_cast<unsigned long long>(run.group.recv_capacity), o.capacity_factor, static_cast<long long>(worst),
        o.overflow.c_str(),
        o.capacity_factor < 1.0 ? (o.overflow == "drop" ? "; outputs checked against the reference model's DROP result"
                                                        : "; a point that overflows stops the run untimed")
                                : "");
  }
  const std::string gpu = run.machine.gpus.empty() ? std::string("?") : run.machine.gpus[0].name;
  s += printf_string(
      "machine: %zu x %s, NCCL %s, driver %s; symmetric memory per GPU %.1f MiB, the plan's %.1f MiB%s "
      "(max %u tokens per rank)\n",
      run.machine.gpus.size(), gpu.c_str(), run.machine.nccl_runtime.c_str(), run.machine.nvidia_driver.c_str(),
      mib(run.group.symmetric_bytes), mib(run.group.planned_symmetric_bytes),
      run.group.symmetric_bytes == run.group.planned_symmetric_bytes ? "" : " (they differ)", run.group.max_tokens);
  if (run.memory_copy) {
    s += printf_string("memory: device-to-device copy of %.0f MiB: %.1f GB/s read + write per GPU\n",
                       mib(static_cast<uint64_t>(run.memory_copy->bytes)), run.memory_copy->copy_GBps());
  }
  s += run.cupti.active ? "kernel spans: CUPTI activity records (" + run.cupti.library + ")\n"
                        : "kernel spans: off (" + run.cupti.why_not + ")\n";
  if (run.floor) {
    s += printf_string(
        "floor: an empty kernel on our grid (%d blocks of %d threads), CUPTI: call %.1f us, step "
        "(two back to back) %.1f us, in a graph's replay call %.1f us, step %.1f us, medians; routed row (one "
        "token's %d-channel 16-bit row loaded with its top-%d ids and stored into those experts' rows, the least a "
        "1-token dispatch does) %.2f us\n",
        run.floor->blocks, run.floor->threads, run.floor->call.slowest.median_us, run.floor->step.slowest.median_us,
        run.floor->graph_call.slowest.median_us, run.floor->graph_step.slowest.median_us, run.options.hidden,
        run.options.topk, run.floor->routed_row.slowest.median_us);
  }
  if (run.ceiling_peak) {
    s += printf_string(
        "ceiling: LSA peer-store copy of %.0f MiB to each of %d peers at once: "
        "%.1f GB/s egress per GPU\n",
        mib(static_cast<uint64_t>(run.ceiling_peak->bytes_per_peer)), run.ceiling_peak->peers,
        run.ceiling_peak->egress_GBps());
  }
  return s;
}

// The kernels' own time beside the event-timed latency table: what peers' kernel durations
// compare with (docs/measuring.md).
std::string gpu_time_table(const RunRecord& run) {
  if (run.points.empty()) return {};
  // Columns follow the flags, not the figures: where CUPTI was off or a pass had no figures
  // the cell shows "-", and the header says why.
  const bool graph = run.options.graph;
  const bool update = run.options.mode == "ht" && run.options.ht_sizing == "capacity";
  const bool floor = run.options.mode == "ll";
  std::string s =
      "\nGPU time in us, median (mean) of the slowest rank, from CUPTI's kernel records: from the first "
      "kernel's start to the last kernel's end of what each call (step) launched\n";
  if (!run.cupti.active) s += "(kernel spans are off: " + run.cupti.why_not + ")\n";
  s += printf_string("%6s | %-15s | %-15s | %-15s", "tokens", "cupti dispatch", "cupti combine", "cupti step");
  if (graph) s += printf_string(" | %-15s | %-15s | %-15s", "graph dispatch", "graph combine", "cupti graph");
  if (update) s += printf_string(" | %-15s", "layout update");
  if (floor) s += printf_string(" | %-15s | %-15s", "floor call", "floor step");
  if (floor && graph) s += printf_string(" | %-15s | %-15s", "graph floor", "graph floor st");
  s += "\n";
  auto floor_text = [&run](AcrossRanks LatencyFloor::* part) {
    if (!run.floor) return std::string("-");
    const AcrossRanks& figure = (*run.floor).*part;
    return printf_string("%.1f (%.1f)", figure.slowest.median_us, figure.slowest.mean_us);
  };
  const std::string floor_call = floor_text(&LatencyFloor::call);
  const std::string floor_step = floor_text(&LatencyFloor::step);
  const std::string graph_floor_call = floor_text(&LatencyFloor::graph_call);
  const std::string graph_floor_step = floor_text(&LatencyFloor::graph_step);
  for (const PointResult& p : run.points) {
    s += printf_string("%6d | %-15s | %-15s | %-15s", p.tokens, median_mean(p, "ours.cupti.dispatch").c_str(),
                       median_mean(p, "ours.cupti.combine").c_str(), median_mean(p, "ours.cupti.step").c_str());
    if (graph) {
      s += printf_string(" | %-15s | %-15s | %-15s", median_mean(p, "ours.cupti_graph.dispatch").c_str(),
                         median_mean(p, "ours.cupti_graph.combine").c_str(),
                         median_mean(p, "ours.cupti_graph.step").c_str());
    }
    if (update) s += printf_string(" | %-15s", median_mean(p, "ours.cupti.layout_update").c_str());
    if (floor) s += printf_string(" | %-15s | %-15s", floor_call.c_str(), floor_step.c_str());
    if (floor && graph) s += printf_string(" | %-15s | %-15s", graph_floor_call.c_str(), graph_floor_step.c_str());
    s += "\n";
  }
  if (graph) {
    s += "graph dispatch, graph combine, cupti graph = the same spans of each step inside graph replays, where no "
         "host launch paces the kernels\n";
  }
  if (floor) {
    s += "floor call = one empty kernel on our grid, what a dispatch or combine compares with; floor step = two "
         "back to back: the least a step of two launches on that grid takes\n";
    if (graph) {
      s += "graph floor, graph floor st = the same inside a graph's replay, what the graph columns compare with\n";
    }
  }
  return s;
}

// The LL phase trace of a -Dphase_trace=true build: where a step's time goes.
std::string phase_table(const RunRecord& run) {
  if (!any_point_has(run, "ours.phase.dispatch_total")) return {};
  std::string s =
      "\nLL phase trace (a -Dphase_trace=true build: the kernels stamp %globaltimer, so its times are not for "
      "comparison), mean us per step of the slowest rank: send / signal / wait / receive = total (docs/measuring.md)\n";
  s += printf_string("%6s | %-40s | %-40s\n", "tokens", "dispatch", "combine");
  auto phases = [](const PointResult& p, const std::string& op) {
    std::string text;
    for (const char* phase : {"send", "signal", "wait", "receive", "total"}) {
      const AcrossRanks* m = p.find("ours.phase." + op + "_" + phase);
      if (!text.empty()) text += std::string(phase) == "total" ? " = " : " / ";
      text += m == nullptr ? "-" : printf_string("%.2f", m->slowest.mean_us);
    }
    return text;
  };
  for (const PointResult& p : run.points) {
    s += printf_string("%6d | %-40s | %-40s\n", p.tokens, phases(p, "dispatch").c_str(), phases(p, "combine").c_str());
  }
  return s;
}

// --micro-batches=2: one layer of two micro-batches, serial and overlapped, and the gain.
std::string micro_batch_table(const RunRecord& run) {
  if (!any_point_has(run, "ours.mb.serial")) return {};
  std::string s = printf_string(
      "\nTwo micro-batches per layer (dispatch, stand-in GEMM of %d us on %s SMs, combine each), us: median "
      "[p10-p90] of the slowest rank (CUDA events per layer; bench/micro_batch_timing.hpp)\n",
      run.options.gemm_us, run.options.gemm_sms == 0 ? "all" : std::to_string(run.options.gemm_sms).c_str());
  s += printf_string("%6s | %-22s | %-22s | %-22s | %14s\n", "tokens", "GEMM alone", "serial layer", "overlapped layer",
                     "overlap/serial");
  for (const PointResult& p : run.points) {
    s += printf_string("%6d | %-22s | %-22s | %-22s | %14s\n", p.tokens, us(p, "ours.mb.gemm", true).c_str(),
                       us(p, "ours.mb.serial", true).c_str(), us(p, "ours.mb.overlap", true).c_str(),
                       num(ratio(p, "ours.mb.overlap", "ours.mb.serial"), "%.3f").c_str());
  }
  return s;
}

}  // namespace

std::string to_table(const RunRecord& run) {
  std::string s = header(run);
  s += "\nLatency in us: median [p10-p90] of the slowest rank; kernel = CUDA events, "
       "api = host clock until done\n";
  // Columns a run may lack (HT's layout step, the ceiling at our SM budget) appear only when
  // some point has them.
  const bool layout = any_point_has(run, "ours.api.layout");
  const bool budget = any_point_has(run, "ceiling_budget.kernel.step");
  bool roof = false;
  for (const PointResult& p : run.points) roof = roof || std::isfinite(roofline_step_us(run, p));
  const std::string budget_title = printf_string("ceil@%u", run.group.num_sms);
  s += printf_string("%6s | %-22s | %-22s | %-22s | %8s | %8s | %9s | %8s", "tokens", "dispatch", "combine",
                     "step (both)", "api step", "graph", "baseline", "ceiling");
  if (roof) s += printf_string(" | %8s", "roofline");
  if (budget) s += printf_string(" | %8s", budget_title.c_str());
  if (layout) s += printf_string(" | %8s", "layout");
  s += printf_string(" | %8s\n", "ours/base");
  for (const PointResult& p : run.points) {
    s += printf_string("%6d | %-22s | %-22s | %-22s | %8s | %8s | %9s | %8s", p.tokens,
                       us(p, "ours.kernel.dispatch", true).c_str(), us(p, "ours.kernel.combine", true).c_str(),
                       us(p, "ours.kernel.step", true).c_str(), us(p, "ours.api.step", false).c_str(),
                       us(p, "ours.graph.step", false).c_str(), us(p, "baseline.kernel.step", false).c_str(),
                       us(p, "ceiling.kernel.step", false).c_str());
    if (roof) s += printf_string(" | %8s", num(roofline_step_us(run, p), "%.1f").c_str());
    if (budget) s += printf_string(" | %8s", us(p, "ceiling_budget.kernel.step", false).c_str());
    if (layout) s += printf_string(" | %8s", us(p, "ours.api.layout", false).c_str());
    int64_t dropped = 0;
    for (int64_t d : p.dropped_rows) dropped += d;
    const std::string drops =
        dropped > 0 ? printf_string("  (%lld rows dropped)", static_cast<long long>(dropped)) : "";
    s += printf_string(" | %8s%s%s\n", num(ratio(p, "ours.kernel.step", "baseline.kernel.step"), "%.2f").c_str(),
                       p.output_checked ? "" : "  (outputs NOT checked)", drops.c_str());
  }
  if (roof) {
    s += "roofline = a lower bound of the step from this run's bandwidths: per op the larger of its device-memory "
         "bytes over the copy bandwidth and its wire bytes over the ceiling's egress (bench/JSON.md)\n";
  }
  if (layout) {
    s += "layout = creating the point's handle (epc_handle_create) until the stream is done, "
         "not part of a step\n";
  }
  s += gpu_time_table(run);
  s += phase_table(run);
  s += micro_batch_table(run);
  s += run.options.mode == "ht"
           ? "\nBandwidth in GB/s per GPU (bench/JSON.md): logical (DeepEP's rule: a row per (token, "
             "destination rank), self included) / wire (bytes leaving the GPU) / wire over the ceiling\n"
           : "\nBandwidth in GB/s per GPU (bench/JSON.md): logical (DeepEP's rule: a row per (token, "
             "expert)) / wire (bytes leaving the GPU) / wire over the ceiling\n";
  s += printf_string("%6s | %-26s | %-26s | %-20s\n", "tokens", "dispatch", "combine", "baseline disp/comb logical");
  for (const PointResult& p : run.points) {
    const Bandwidth d = bandwidth(run, p, "ours", "dispatch");
    const Bandwidth c = bandwidth(run, p, "ours", "combine");
    const Bandwidth bd = bandwidth(run, p, "baseline", "dispatch");
    const Bandwidth bc = bandwidth(run, p, "baseline", "combine");
    auto three = [](const Bandwidth& b) {
      return num(b.logical_GBps, "%.1f") + " / " + num(b.wire_GBps, "%.1f") + " / " + num(b.wire_over_ceiling, "%.2f");
    };
    s += printf_string("%6d | %-26s | %-26s | %-20s\n", p.tokens, three(d).c_str(), three(c).c_str(),
                       (num(bd.logical_GBps, "%.1f") + " / " + num(bc.logical_GBps, "%.1f")).c_str());
  }
  // Where our wire bytes go: to ranks in this rank's node over NVLink, to other nodes through
  // the network transport (only with --virtual-node-size: otherwise every figure is NVLink).
  bool layout_bytes = false;
  for (const PointResult& p : run.points)
    layout_bytes = layout_bytes || mean_bytes(p, &RankTraffic::wire_layout_bytes) > 0;
  s += "\nWire bytes per GPU (mean over ranks), NVLink / network (to other nodes, through the network "
       "transport)\n";
  s += printf_string("%6s | %-23s | %-23s", "tokens", "dispatch", "combine");
  if (layout_bytes) s += printf_string(" | %-23s", "layout");
  s += "\n";
  for (const PointResult& p : run.points) {
    auto two = [&p](int64_t RankTraffic::* nvlink, int64_t RankTraffic::* network) {
      return bytes_text(mean_bytes(p, nvlink)) + " / " + bytes_text(mean_bytes(p, network));
    };
    s += printf_string("%6d | %-23s | %-23s", p.tokens,
                       two(&RankTraffic::wire_dispatch_nvlink_bytes, &RankTraffic::wire_dispatch_network_bytes).c_str(),
                       two(&RankTraffic::wire_combine_nvlink_bytes, &RankTraffic::wire_combine_network_bytes).c_str());
    if (layout_bytes) {
      s += printf_string(" | %-23s",
                         two(&RankTraffic::wire_layout_nvlink_bytes, &RankTraffic::wire_layout_network_bytes).c_str());
    }
    s += "\n";
  }
  if (!run.complete) s += "\n(incomplete: not every requested point was measured)\n";
  return s;
}

}  // namespace epc::bench
