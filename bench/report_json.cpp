// SPDX-License-Identifier: Apache-2.0
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "bench/json_writer.hpp"
#include "bench/report.hpp"

namespace epc::bench {
namespace {

const char* routing_name(RoutingKind k) { return k == RoutingKind::skewed ? "skewed" : "uniform"; }

void write_config(JsonWriter& j, const RunRecord& run) {
  const Options& o = run.options;
  j.key("config");
  j.begin_object();
  j.field("mode", o.mode);
  j.field("ranks", run.nranks);
  j.key("tokens_per_rank");
  j.begin_array(true);
  for (int t : o.tokens) j.value(t);
  j.end_array();
  j.field("max_tokens_per_rank", static_cast<int64_t>(run.group.max_tokens));
  j.field("ht_sizing", o.mode == "ht" ? o.ht_sizing : std::string("none"));
  // /5: the receive window (HT; LL's holds R * T rows by construction).
  j.key("capacity_factor");
  if (o.mode == "ht") {
    j.value(o.capacity_factor);
  } else {
    j.null();
  }
  j.field("overflow", o.mode == "ht" ? o.overflow : std::string("none"));
  j.key("recv_capacity");
  if (o.mode == "ht") {
    j.value(static_cast<int64_t>(run.group.recv_capacity));
  } else {
    j.null();
  }
  j.field("hidden", o.hidden);
  j.field("topk", o.topk);
  j.field("experts", o.experts);
  j.field("local_experts", static_cast<int64_t>(run.group.local_experts));
  j.field("dtype", o.dtype);
  j.field("fp8_pow2_scales", o.pow2_scales);
  // /6: the options that pick what dispatch writes and what the payload is, so that records of
  // one family of command lines are told apart by their config alone.
  j.field("layout", o.layout);
  j.field("alignment", o.alignment);
  j.field("weights_at", o.weights_at);
  j.field("quant", o.quant);
  j.field("payload", o.payload);
  j.field("scales", o.scales);
  j.field("scale_count", o.scale_count);
  j.field("sms", static_cast<int64_t>(run.group.num_sms));
  // Ours only: the baseline and the ceiling always move their bytes over NVLink.
  j.field("virtual_node_size", o.virtual_node_size);
  j.field("nodes", static_cast<int64_t>(run.group.num_nodes > 0 ? run.group.num_nodes : 1));
  j.key("routing");
  j.begin_object();
  j.field("kind", routing_name(o.routing.kind));
  j.field("hot_expert", o.routing.hot_expert);
  j.field("hot_share", o.routing.kind == RoutingKind::skewed ? o.routing.hot_share : 0.0);
  j.field("masked", o.routing.masked);
  j.field("seed", static_cast<int64_t>(o.routing.seed));
  j.end_object();
  j.field("warmup", o.warmup);
  j.field("iters", o.iters);
  j.field("large_from", o.large_from);
  j.field("large_warmup", o.large_warmup);
  j.field("large_iters", o.large_iters);
  j.field("graph", o.graph);
  j.field("graph_replays", o.graph_replays);
  j.field("send_only", o.send_only);
  j.field("step_bound", o.step_bound);
  j.field("cold_l2", o.cold_l2);
  j.field("micro_batches", o.micro_batches);
  j.field("gemm_us", o.gemm_us);
  j.field("gemm_sms", o.gemm_sms);
  j.field("baseline", o.baseline);
  j.field("ceiling", o.ceiling);
  j.field("ceiling_peak_bytes_per_peer", static_cast<int64_t>(o.ceiling_peak_mib) << 20);
  j.field("cupti", o.cupti);
  j.field("phase_trace", run.phase_trace);
  j.end_object();
}

void write_machine(JsonWriter& j, const MachineInfo& m) {
  j.key("machine");
  j.begin_object();
  j.field("hostname", m.hostname);
  j.key("gpus");
  j.begin_array();
  for (const GpuInfo& g : m.gpus) {
    j.begin_object();
    j.field("rank", g.rank);
    j.field("device", g.device);
    j.field("name", g.name);
    j.field("pci_bus_id", g.pci_bus_id);
    j.end_object();
  }
  j.end_array();
  j.field("nccl_runtime", m.nccl_runtime);
  j.field("nccl_headers", m.nccl_headers);
  j.field("nccl_library", m.nccl_library);
  j.field("cuda_driver", m.cuda_driver);
  j.field("cuda_runtime", m.cuda_runtime);
  j.field("nvidia_driver", m.nvidia_driver);
  j.field("epcomm_abi", m.epcomm_abi);
  j.field("epcomm_commit", m.epcomm_commit);
  j.end_object();
}

void text_or_null(JsonWriter& j, const char* name, bool present, const std::string& text) {
  j.key(name);
  if (present) {
    j.value(text);
  } else {
    j.null();
  }
}

void write_summary(JsonWriter& j, const AcrossRanks& a) {
  j.begin_object();
  j.field("median_us", a.slowest.median_us);
  j.field("p10_us", a.slowest.p10_us);
  j.field("p90_us", a.slowest.p90_us);
  j.field("mean_us", a.slowest.mean_us);
  j.field("samples", a.slowest.samples);
  j.field("slowest_rank", a.slowest_rank);
  j.key("per_rank_median_us");
  j.begin_array(true);
  for (double v : a.per_rank_median_us) j.value(v);
  j.end_array();
  j.end_object();
}

void per_rank(JsonWriter& j, const PointResult& p, const char* name, int64_t RankTraffic::* field) {
  j.key(name);
  j.begin_array(true);
  for (const RankTraffic& t : p.traffic) j.value(t.*field);
  j.end_array();
}

void write_point(JsonWriter& j, const RunRecord& run, const PointResult& p) {
  j.begin_object();
  j.field("tokens_per_rank", p.tokens);
  j.field("warmup", p.warmup);
  j.field("iters", p.iters);
  j.field("output_checked", p.output_checked);
  j.key("dropped_rows");  // /5
  j.begin_array(true);
  for (int r = 0; r < run.nranks; ++r) {
    j.value(static_cast<size_t>(r) < p.dropped_rows.size() ? p.dropped_rows[static_cast<size_t>(r)] : int64_t{0});
  }
  j.end_array();
  j.key("bytes");
  j.begin_object();
  per_rank(j, p, "selections", &RankTraffic::selections);
  per_rank(j, p, "token_ranks", &RankTraffic::token_ranks);
  per_rank(j, p, "received_tokens", &RankTraffic::received_tokens);
  per_rank(j, p, "logical_dispatch", &RankTraffic::logical_dispatch_bytes);
  per_rank(j, p, "logical_combine", &RankTraffic::logical_combine_bytes);
  per_rank(j, p, "wire_dispatch", &RankTraffic::wire_dispatch_bytes);
  per_rank(j, p, "wire_combine", &RankTraffic::wire_combine_bytes);
  per_rank(j, p, "wire_layout", &RankTraffic::wire_layout_bytes);
  per_rank(j, p, "wire_dispatch_nvlink", &RankTraffic::wire_dispatch_nvlink_bytes);
  per_rank(j, p, "wire_dispatch_network", &RankTraffic::wire_dispatch_network_bytes);
  per_rank(j, p, "wire_combine_nvlink", &RankTraffic::wire_combine_nvlink_bytes);
  per_rank(j, p, "wire_combine_network", &RankTraffic::wire_combine_network_bytes);
  per_rank(j, p, "wire_layout_nvlink", &RankTraffic::wire_layout_nvlink_bytes);
  per_rank(j, p, "wire_layout_network", &RankTraffic::wire_layout_network_bytes);
  per_rank(j, p, "baseline_wire_dispatch", &RankTraffic::baseline_wire_dispatch_bytes);
  per_rank(j, p, "baseline_wire_combine", &RankTraffic::baseline_wire_combine_bytes);
  per_rank(j, p, "memory_dispatch", &RankTraffic::memory_dispatch_bytes);
  per_rank(j, p, "memory_combine", &RankTraffic::memory_combine_bytes);
  j.end_object();

  j.key("times");
  j.begin_object();
  for (const Metric& m : p.metrics) {
    j.key(m.name);
    write_summary(j, m.value);
  }
  j.end_object();

  j.key("bandwidth");
  j.begin_object();
  for (const char* who : {"ours", "baseline", "ceiling", "ceiling_budget"}) {
    for (const char* op : {"dispatch", "combine"}) {
      const std::string name = std::string(who) + "." + op;
      if (p.find(std::string(who) + ".kernel." + op) == nullptr) continue;
      const Bandwidth b = bandwidth(run, p, who, op);
      j.key(name);
      j.begin_object();
      j.field("logical_GBps", b.logical_GBps);
      j.field("wire_GBps", b.wire_GBps);
      j.field("wire_over_ceiling", b.wire_over_ceiling);
      j.end_object();
    }
  }
  j.end_object();

  j.key("roofline");
  j.begin_object();
  for (const char* op : {"dispatch", "combine"}) {
    const Roofline r = roofline(run, p, op);
    j.key(op);
    j.begin_object();
    j.field("memory_bytes", r.memory_bytes);
    j.field("wire_bytes", r.wire_bytes);
    j.field("memory_us", r.memory_us);
    j.field("wire_us", r.wire_us);
    j.field("us", r.us);
    j.end_object();
  }
  j.field("step_us", roofline_step_us(run, p));
  j.end_object();

  j.key("ratios");
  j.begin_object();
  for (const char* op : {"dispatch", "combine", "step"}) {
    j.field(std::string("ours_over_baseline.") + op,
            ratio(p, std::string("ours.kernel.") + op, std::string("baseline.kernel.") + op));
  }
  j.field("ours_over_baseline.api_step", ratio(p, "ours.api.step", "baseline.api.step"));
  for (const char* ceiling : {"ceiling", "ceiling_budget"}) {
    for (const char* op : {"dispatch", "combine", "step"}) {
      j.field(std::string("ours_over_") + ceiling + "." + op,
              ratio(p, std::string("ours.kernel.") + op, std::string(ceiling) + ".kernel." + op));
    }
  }
  j.end_object();
  j.end_object();
}

}  // namespace

std::string to_json(const RunRecord& run) {
  JsonWriter j;
  j.begin_object();
  j.field("format", kJsonFormat);
  j.field("format_sample", run.format_sample);
  if (run.format_sample) {
    j.field("note",
            "FORMAT SAMPLE: every number in this file is invented to show the format; "
            "it is not a measurement");
  }
  j.field("complete", run.complete);
  j.field("created_utc", run.created_utc);
  j.field("command", run.command);
  write_config(j, run);
  write_machine(j, run.machine);
  j.key("group");
  j.begin_object();
  j.field("symmetric_bytes_per_gpu", static_cast<int64_t>(run.group.symmetric_bytes));
  j.field("planned_symmetric_bytes_per_gpu", static_cast<int64_t>(run.group.planned_symmetric_bytes));
  j.field("workspace_bytes_per_gpu", static_cast<int64_t>(run.group.workspace_bytes));
  j.field("message_bytes", static_cast<int64_t>(run.group.message_bytes));
  j.end_object();
  j.field("wire_format", run.wire.describe());
  j.key("ceiling_peak");
  if (run.ceiling_peak) {
    j.begin_object();
    j.field("bytes_per_peer", run.ceiling_peak->bytes_per_peer);
    j.field("peers", run.ceiling_peak->peers);
    j.key("time");
    write_summary(j, run.ceiling_peak->time);
    j.field("egress_GBps", run.ceiling_peak->egress_GBps());
    j.end_object();
  } else {
    j.null();
  }
  j.key("memory_copy");
  if (run.memory_copy) {
    j.begin_object();
    j.field("bytes", run.memory_copy->bytes);
    j.key("time");
    write_summary(j, run.memory_copy->time);
    j.field("copy_GBps", run.memory_copy->copy_GBps());
    j.end_object();
  } else {
    j.null();
  }
  j.key("cupti");
  j.begin_object();
  j.field("active", run.cupti.active);
  text_or_null(j, "library", run.cupti.active, run.cupti.library);
  text_or_null(j, "why_not", !run.cupti.active, run.cupti.why_not);
  j.end_object();
  j.key("floor");
  if (run.floor) {
    j.begin_object();
    j.field("blocks", run.floor->blocks);
    j.field("threads", run.floor->threads);
    j.key("call");
    write_summary(j, run.floor->call);
    j.key("step");
    write_summary(j, run.floor->step);
    j.key("routed_row");
    write_summary(j, run.floor->routed_row);
    j.key("graph_call");
    write_summary(j, run.floor->graph_call);
    j.key("graph_step");
    write_summary(j, run.floor->graph_step);
    j.end_object();
  } else {
    j.null();
  }
  j.key("points");
  j.begin_array();
  for (const PointResult& p : run.points) write_point(j, run, p);
  j.end_array();
  j.end_object();
  return j.str() + "\n";
}

bool write_file_atomically(const std::string& path, const std::string& text, std::string& error) {
  const std::string temp = path + ".tmp";
  std::FILE* f = std::fopen(temp.c_str(), "w");
  if (f == nullptr) {
    error = "cannot open " + temp + " for writing: " + std::strerror(errno);
    return false;
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    error = "cannot write " + temp + ": " + std::strerror(errno);
    std::remove(temp.c_str());
    return false;
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    error = "cannot rename " + temp + " to " + path + ": " + std::strerror(errno);
    std::remove(temp.c_str());
    return false;
  }
  return true;
}

}  // namespace epc::bench
