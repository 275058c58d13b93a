// Writes bench/samples/format_sample.json: the JSON format filled with INVENTED numbers, so
// that plot.py and readers of bench/JSON.md have a file to work with before any GPU run. The
// byte counts are computed from real routing; every time is made up by a formula below and
// the file says so (format_sample: true, a note, and "format sample" as machine names).
// `--table` prints the table view of the same record instead.
#include <cstdio>
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
  a.slowest_rank = nranks - 1;
  for (int r = 0; r < nranks; ++r) a.per_rank_median_us.push_back(median_us * (0.97 + 0.01 * r));
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const bool table = argc > 1 && std::strcmp(argv[1], "--table") == 0;
  RunRecord run;
  run.format_sample = true;
  run.complete = true;
  run.command = "epcomm-bench --tokens=1..256 --out=format_sample.json (format sample, not run)";
  run.created_utc = "1970-01-01T00:00:00Z";
  run.nranks = 4;
  run.options.tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  run.options.out = "format_sample.json";
  const int R = run.nranks;
  for (int r = 0; r < R; ++r) run.machine.gpus.push_back(GpuInfo{r, r, "format sample (no GPU)", "none"});
  run.machine.hostname = "format-sample";
  run.machine.nccl_runtime = run.machine.nccl_headers = "0.0.0";
  run.machine.nccl_library = run.machine.cuda_driver = run.machine.cuda_runtime = "none";
  run.machine.nvidia_driver = "none";
  run.machine.epcomm_abi = "1.0.0";
  run.group.symmetric_bytes = 58982400;
  run.group.workspace_bytes = 256;
  run.group.message_bytes = 14432;
  run.group.num_sms = 32;
  run.group.local_experts = 64;
  run.group.max_tokens = 256;
  run.wire = WireFormat::for_dtype(run.options.hidden, false);
  CeilingPeak peak;
  peak.bytes_per_peer = 32 << 20;
  peak.peers = R - 1;
  peak.time = invented(300.0, R);
  run.ceiling_peak = peak;

  for (int tokens : run.options.tokens) {
    PointResult p;
    p.tokens = tokens;
    p.output_checked = true;
    const std::vector<Routing> all = make_all_routing(run.options.routing, R, tokens, run.options.topk,
                                                      run.options.experts);
    for (int r = 0; r < R; ++r) {
      p.traffic.push_back(compute_traffic(all, r, tokens, run.options.topk, run.options.experts, run.wire,
                                          static_cast<int64_t>(R) * 256));
    }
    const double t = tokens;
    const double d = 15 + 0.8 * t, c = 18 + 0.9 * t;           // invented
    const double bd = 60 + 2.0 * t, bc = 40 + 1.8 * t;         // invented
    const double cd = 6 + 0.25 * t, cc = 6 + 0.2 * t;          // invented
    for (const auto& [name, us] : std::vector<std::pair<const char*, double>>{
             {"ours.kernel.dispatch", d}, {"ours.kernel.combine", c}, {"ours.kernel.step", d + c},
             {"ours.api.dispatch", d + 12}, {"ours.api.combine", c + 12}, {"ours.api.step", d + c + 24},
             {"ours.api.dispatch_call", 6}, {"ours.api.combine_call", 5},
             {"baseline.kernel.dispatch", bd}, {"baseline.kernel.combine", bc},
             {"baseline.kernel.step", bd + bc}, {"baseline.api.dispatch", bd + 10},
             {"baseline.api.combine", bc + 10}, {"baseline.api.step", bd + bc + 20},
             {"ceiling.kernel.dispatch", cd}, {"ceiling.kernel.combine", cc},
             {"ceiling.kernel.step", cd + cc}}) {
      p.metrics.push_back(Metric{name, invented(us, R)});
    }
    run.points.push_back(p);
  }
  const std::string text = table ? to_table(run) : to_json(run);
  std::fputs(text.c_str(), stdout);
  return 0;
}
