// SPDX-License-Identifier: Apache-2.0
// Derived figures (bandwidths, ratios) and what the JSON and the table show.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/report.hpp"

namespace epc::bench {
namespace {

AcrossRanks median(double us) {
  AcrossRanks a;
  a.slowest.p10_us = us * 0.9;
  a.slowest.median_us = us;
  a.slowest.p90_us = us * 1.1;
  a.slowest.samples = 10;
  a.slowest.mean_us = us * 1.25;
  a.slowest_rank = 1;
  a.per_rank_median_us = {us * 0.5, us};
  return a;
}

RunRecord two_rank_run() {
  RunRecord run;
  run.nranks = 2;
  run.options.tokens = {4};
  CeilingPeak peak;
  peak.bytes_per_peer = 1000000;
  peak.peers = 1;
  peak.time = median(10);  // 1e6 bytes in 10 us: 100 GB/s
  run.ceiling_peak = peak;
  PointResult p;
  p.tokens = 4;
  p.output_checked = true;
  RankTraffic a, b;
  a.logical_dispatch_bytes = 2000000;
  b.logical_dispatch_bytes = 4000000;  // mean 3e6
  a.wire_dispatch_bytes = 1000000;
  b.wire_dispatch_bytes = 1000000;
  a.logical_combine_bytes = b.logical_combine_bytes = 500000;
  a.wire_combine_bytes = b.wire_combine_bytes = 250000;
  a.baseline_wire_dispatch_bytes = b.baseline_wire_dispatch_bytes = 3000000;
  p.traffic = {a, b};
  p.metrics = {{"ours.kernel.dispatch", median(100)},
               {"ours.kernel.combine", median(50)},
               {"ours.kernel.step", median(150)},
               {"baseline.kernel.dispatch", median(400)},
               {"baseline.kernel.step", median(600)}};
  run.points = {p};
  return run;
}

TEST(Report, Bandwidths) {
  const RunRecord run = two_rank_run();
  const PointResult& p = run.points[0];
  EXPECT_DOUBLE_EQ(gbps(1e6, 1), 1000.0);  // a megabyte per microsecond is a terabyte per second
  EXPECT_DOUBLE_EQ(run.ceiling_peak->egress_GBps(), 100.0);
  const Bandwidth d = bandwidth(run, p, "ours", "dispatch");
  EXPECT_DOUBLE_EQ(d.logical_GBps, 30.0);  // 3e6 bytes in 100 us
  EXPECT_DOUBLE_EQ(d.wire_GBps, 10.0);
  EXPECT_DOUBLE_EQ(d.wire_over_ceiling, 0.1);
  const Bandwidth c = bandwidth(run, p, "ours", "combine");
  EXPECT_DOUBLE_EQ(c.logical_GBps, 10.0);
  EXPECT_DOUBLE_EQ(c.wire_GBps, 5.0);
  const Bandwidth bd = bandwidth(run, p, "baseline", "dispatch");
  EXPECT_DOUBLE_EQ(bd.logical_GBps, 7.5);
  EXPECT_DOUBLE_EQ(bd.wire_GBps, 7.5);
  EXPECT_TRUE(std::isnan(bandwidth(run, p, "baseline", "combine").wire_GBps));  // not measured
}

TEST(Report, Ratios) {
  const RunRecord run = two_rank_run();
  const PointResult& p = run.points[0];
  EXPECT_DOUBLE_EQ(ratio(p, "ours.kernel.step", "baseline.kernel.step"), 0.25);
  EXPECT_TRUE(std::isnan(ratio(p, "ours.kernel.combine", "baseline.kernel.combine")));
}

TEST(Report, JsonCarriesTheFigures) {
  RunRecord run = two_rank_run();
  const std::string json = to_json(run);
  EXPECT_NE(json.find("\"format\": \"epcomm-bench/9\""), std::string::npos);
  EXPECT_NE(json.find("\"median_us\": 100,"), std::string::npos);
  EXPECT_NE(json.find("\"mean_us\": 125,"), std::string::npos);
  EXPECT_NE(json.find("\"virtual_node_size\": 0"), std::string::npos);
  EXPECT_NE(json.find("\"nodes\": 1"), std::string::npos);
  EXPECT_NE(json.find("\"wire_dispatch_nvlink\": [0, 0]"), std::string::npos);
  EXPECT_NE(json.find("\"wire_combine_network\": [0, 0]"), std::string::npos);
  EXPECT_NE(json.find("\"wire_layout_network\": [0, 0]"), std::string::npos);
  EXPECT_NE(json.find("\"ht_sizing\": \"none\""), std::string::npos);
  EXPECT_NE(json.find("\"wire_layout\": [0, 0]"), std::string::npos);
  EXPECT_NE(json.find("\"ours_over_ceiling_budget.step\": null"), std::string::npos);
  EXPECT_NE(json.find("\"format_sample\": false"), std::string::npos);
  EXPECT_EQ(json.find("FORMAT SAMPLE"), std::string::npos);
  EXPECT_NE(json.find("\"ours.kernel.dispatch\": {"), std::string::npos);
  EXPECT_NE(json.find("\"per_rank_median_us\": [50, 100]"), std::string::npos);
  EXPECT_NE(json.find("\"logical_GBps\": 30"), std::string::npos);
  EXPECT_NE(json.find("\"ours_over_baseline.step\": 0.25"), std::string::npos);
  EXPECT_NE(json.find("\"ours_over_baseline.combine\": null"), std::string::npos);
  run.format_sample = true;
  EXPECT_NE(to_json(run).find("FORMAT SAMPLE"), std::string::npos);
}

TEST(Report, TableShowsMediansRangesAndGaps) {
  RunRecord run = two_rank_run();
  const std::string table = to_table(run);
  EXPECT_NE(table.find("100.0 [90.0-110.0]"), std::string::npos) << table;
  EXPECT_NE(table.find("0.25"), std::string::npos) << table;
  EXPECT_NE(table.find("100.0 GB/s egress"), std::string::npos) << table;
  EXPECT_NE(table.find("30.0 / 10.0 / 0.10"), std::string::npos) << table;
  EXPECT_NE(table.find("(incomplete"), std::string::npos) << table;
  run.complete = true;
  EXPECT_EQ(to_table(run).find("(incomplete"), std::string::npos);
  run.format_sample = true;
  EXPECT_EQ(to_table(run).rfind("FORMAT SAMPLE", 0), 0u);
}

TEST(Report, HighThroughputShowsLayoutAndTheBudgetCeiling) {
  RunRecord run = two_rank_run();
  run.options.mode = "ht";
  run.options.ht_sizing = "capacity";
  run.group.num_sms = 24;
  PointResult& p = run.points[0];
  p.metrics.push_back({"ceiling_budget.kernel.dispatch", median(50)});
  p.metrics.push_back({"ceiling_budget.kernel.step", median(75)});
  p.metrics.push_back({"ours.api.layout", median(42)});
  const Bandwidth b = bandwidth(run, p, "ceiling_budget", "dispatch");
  EXPECT_DOUBLE_EQ(b.wire_GBps, 20.0);  // our wire bytes (1e6) in 50 us
  const std::string table = to_table(run);
  EXPECT_NE(table.find("high-throughput (capacity sizing)"), std::string::npos) << table;
  EXPECT_NE(table.find("ceil@24"), std::string::npos) << table;
  EXPECT_NE(table.find("75.0"), std::string::npos) << table;
  EXPECT_NE(table.find("42.0"), std::string::npos) << table;
  EXPECT_NE(table.find("(token, destination rank)"), std::string::npos) << table;
  const std::string json = to_json(run);
  EXPECT_NE(json.find("\"ht_sizing\": \"capacity\""), std::string::npos);
  EXPECT_NE(json.find("\"ceiling_budget.dispatch\": {"), std::string::npos);
  EXPECT_NE(json.find("\"ours_over_ceiling_budget.dispatch\": 2"), std::string::npos);
  // A low-latency run without those figures has no such columns.
  EXPECT_EQ(to_table(two_rank_run()).find("layout"), std::string::npos);
}

TEST(Report, VirtualNodesShowInTheHeaderAndTheBytes) {
  RunRecord run = two_rank_run();
  EXPECT_EQ(to_table(run).find("virtual nodes"), std::string::npos);  // not asked for
  run.options.virtual_node_size = 1;
  run.group.num_nodes = 2;
  RankTraffic& a = run.points[0].traffic[0];
  RankTraffic& b = run.points[0].traffic[1];
  a.wire_dispatch_nvlink_bytes = b.wire_dispatch_nvlink_bytes = 0;
  a.wire_dispatch_network_bytes = 1000000;
  b.wire_dispatch_network_bytes = 3000000;  // mean 2 MB
  a.wire_combine_network_bytes = b.wire_combine_network_bytes = 250000;
  a.wire_layout_network_bytes = b.wire_layout_network_bytes = 24;
  a.wire_layout_bytes = b.wire_layout_bytes = 24;
  const std::string table = to_table(run);
  EXPECT_NE(table.find("virtual nodes: 2 nodes of 1 ranks"), std::string::npos) << table;
  EXPECT_NE(table.find("the baseline and the ceiling use NVLink throughout"), std::string::npos) << table;
  EXPECT_NE(table.find("NVLink / network"), std::string::npos) << table;
  EXPECT_NE(table.find("0 B / 2.0 MB"), std::string::npos) << table;
  EXPECT_NE(table.find("0 B / 250.0 kB"), std::string::npos) << table;
  EXPECT_NE(table.find("0 B / 24 B"), std::string::npos) << table;  // HT's layout, when there is one
  const std::string json = to_json(run);
  EXPECT_NE(json.find("\"virtual_node_size\": 1"), std::string::npos);
  EXPECT_NE(json.find("\"nodes\": 2"), std::string::npos);
  EXPECT_NE(json.find("\"wire_dispatch_network\": [1000000, 3000000]"), std::string::npos);
  EXPECT_NE(json.find("\"wire_layout_network\": [24, 24]"), std::string::npos);
}

TEST(Report, RooflineFromBytesAndBandwidths) {
  RunRecord run = two_rank_run();
  PointResult& p = run.points[0];
  // The ceiling's 100 GB/s egress only: wire bytes, the largest over ranks.
  Roofline d = roofline(run, p, "dispatch");
  EXPECT_EQ(d.wire_bytes, 1e6);
  EXPECT_DOUBLE_EQ(d.wire_us, 10.0);
  EXPECT_TRUE(std::isnan(d.memory_us));
  EXPECT_DOUBLE_EQ(d.us, 10.0);
  EXPECT_DOUBLE_EQ(roofline_step_us(run, p), 12.5);  // combine: 250 kB at 100 GB/s
  // With a copy of 1 MB in 1 us: 2000 GB/s read + write.
  run.memory_copy = MemoryCopy{1000000, median(1)};
  EXPECT_DOUBLE_EQ(run.memory_copy->copy_GBps(), 2000.0);
  p.traffic[0].memory_dispatch_bytes = 4000000;
  p.traffic[1].memory_dispatch_bytes = 2000000;
  p.traffic[0].memory_combine_bytes = 1000000;
  p.traffic[1].memory_combine_bytes = 10000000;
  d = roofline(run, p, "dispatch");
  EXPECT_EQ(d.memory_bytes, 4e6);
  EXPECT_DOUBLE_EQ(d.memory_us, 2.0);
  EXPECT_DOUBLE_EQ(d.us, 10.0);  // the wire is the bound
  const Roofline c = roofline(run, p, "combine");
  EXPECT_DOUBLE_EQ(c.memory_us, 5.0);
  EXPECT_DOUBLE_EQ(c.us, 5.0);  // device memory is the bound
  EXPECT_DOUBLE_EQ(roofline_step_us(run, p), 15.0);
  const std::string table = to_table(run);
  EXPECT_NE(table.find("memory: device-to-device copy of 1 MiB: 2000.0 GB/s read + write per GPU"), std::string::npos)
      << table;
  EXPECT_NE(table.find("| roofline |"), std::string::npos) << table;
  EXPECT_NE(table.find("|     15.0 |"), std::string::npos) << table;
  const std::string json = to_json(run);
  EXPECT_NE(json.find("\"memory_dispatch\": [4000000, 2000000]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"step_us\": 15"), std::string::npos) << json;
  EXPECT_NE(json.find("\"copy_GBps\": 2000"), std::string::npos) << json;
  // One rank without a memory copy: no bound at all.
  run.ceiling_peak.reset();
  run.memory_copy.reset();
  EXPECT_TRUE(std::isnan(roofline_step_us(run, p)));
  EXPECT_EQ(to_table(run).find("roofline"), std::string::npos);
  EXPECT_NE(to_json(run).find("\"step_us\": null"), std::string::npos);
}

TEST(Report, KernelSpansShowBesideTheEventTimes) {
  RunRecord run = two_rank_run();
  run.cupti.why_not = "CUPTI could not be loaded (libcupti.so.13: cannot open shared object file)";
  std::string table = to_table(run);
  EXPECT_NE(table.find("kernel spans: off (CUPTI could not be loaded (libcupti.so.13"), std::string::npos) << table;
  // The columns stay, each cell "-", with the reason beside them.
  EXPECT_NE(table.find("GPU time"), std::string::npos) << table;
  EXPECT_NE(table.find("(kernel spans are off: CUPTI could not be loaded"), std::string::npos) << table;
  EXPECT_NE(table.find("     4 | -               | -               | -               | -"), std::string::npos)
      << table;  // LL: the floor column too
  std::string json = to_json(run);
  EXPECT_NE(json.find("\"active\": false,\n    \"library\": null,\n    \"why_not\": \"CUPTI could not be loaded"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"cupti\": true"), std::string::npos);  // the flag, in config

  run.cupti = CuptiStatus{true, "libcupti.so.13", ""};
  PointResult& p = run.points[0];
  p.metrics.push_back({"ours.cupti.dispatch", median(40)});
  p.metrics.push_back({"ours.cupti.combine", median(30)});
  p.metrics.push_back({"ours.cupti.step", median(72)});
  table = to_table(run);
  EXPECT_NE(table.find("kernel spans: CUPTI activity records (libcupti.so.13)"), std::string::npos) << table;
  EXPECT_NE(table.find("GPU time in us"), std::string::npos) << table;
  EXPECT_NE(table.find("40.0 (50.0)     | 30.0 (37.5)     | 72.0 (90.0)"), std::string::npos) << table;
  EXPECT_EQ(table.find("cupti graph"), std::string::npos) << table;  // no --graph: no column
  EXPECT_EQ(table.find("kernel spans are off"), std::string::npos) << table;
  EXPECT_NE(table.find("| 72.0 (90.0)     | -"), std::string::npos) << table;  // the floor was not measured
  run.options.graph = true;
  p.metrics.push_back({"ours.cupti_graph.step", median(60)});
  EXPECT_NE(to_table(run).find("| 60.0 (75.0)"), std::string::npos) << to_table(run);
  EXPECT_NE(to_json(run).find("\"floor\": null"), std::string::npos);
  run.floor = LatencyFloor{132, 512, median(3), median(7), median(4), median(2), median(5)};
  table = to_table(run);
  EXPECT_NE(table.find("floor: an empty kernel on our grid (132 blocks of 512 threads), CUPTI: call 3.0 us, step "
                       "(two back to back) 7.0 us, in a graph's replay call 2.0 us, step 5.0 us"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("stored into those experts' rows, the least a 1-token dispatch does) 4.00 us"),
            std::string::npos)
      << table;
  // Every row, the graph floor beside the eager one (--graph).
  EXPECT_NE(table.find("| 60.0 (75.0)     | 3.0 (3.8)       | 7.0 (8.8)       | 2.0 (2.5)       | 5.0 (6.2)"),
            std::string::npos)
      << table;
  json = to_json(run);
  EXPECT_NE(json.find("\"floor\": {\n    \"blocks\": 132,\n    \"threads\": 512,\n    \"call\": {"), std::string::npos)
      << json;
  const size_t routed = json.find("\"routed_row\": {");
  ASSERT_NE(routed, std::string::npos) << json;
  EXPECT_EQ(json.find("\"median_us\": 4,", routed), json.find("\"median_us\"", routed)) << json;
  const size_t graph_step = json.find("\"graph_step\": {");
  ASSERT_NE(graph_step, std::string::npos) << json;
  EXPECT_EQ(json.find("\"median_us\": 5,", graph_step), json.find("\"median_us\"", graph_step)) << json;
  EXPECT_NE(json.find("\"active\": true,\n    \"library\": \"libcupti.so.13\",\n    \"why_not\": null"),
            std::string::npos)
      << json;
  const size_t step = json.find("\"ours.cupti.step\": {");
  ASSERT_NE(step, std::string::npos) << json;
  EXPECT_EQ(json.find("\"median_us\": 72,", step), json.find("\"median_us\"", step)) << json;
}

TEST(Report, PhaseTraceShowsWhereAStepGoes) {
  RunRecord run = two_rank_run();
  EXPECT_EQ(to_table(run).find("phase trace"), std::string::npos);
  EXPECT_NE(to_json(run).find("\"phase_trace\": false"), std::string::npos);
  run.phase_trace = true;
  PointResult& p = run.points[0];
  const char* phases[] = {"send", "signal", "wait", "receive", "total"};
  for (int i = 0; i < 5; ++i) {
    p.metrics.push_back({std::string("ours.phase.dispatch_") + phases[i], median(i + 1)});  // means 1.25 x
    p.metrics.push_back({std::string("ours.phase.combine_") + phases[i], median(2 * (i + 1))});
  }
  const std::string table = to_table(run);
  EXPECT_EQ(table.rfind("PHASE TRACE BUILD", 0), 0u) << table;
  EXPECT_NE(table.find("LL phase trace"), std::string::npos) << table;
  EXPECT_NE(table.find("| 1.25 / 2.50 / 3.75 / 5.00 = 6.25"), std::string::npos) << table;
  EXPECT_NE(table.find("| 2.50 / 5.00 / 7.50 / 10.00 = 12.50"), std::string::npos) << table;
  EXPECT_NE(to_json(run).find("\"phase_trace\": true"), std::string::npos);
}

TEST(Report, ColdL2ShowsInTheHeaderAndTheConfig) {
  RunRecord run = two_rank_run();
  EXPECT_EQ(to_table(run).find("COLD L2"), std::string::npos);
  EXPECT_NE(to_json(run).find("\"cold_l2\": false"), std::string::npos);
  run.options.cold_l2 = true;
  const std::string table = to_table(run);
  EXPECT_EQ(table.rfind("COLD L2 (--cold-l2)", 0), 0u) << table;
  EXPECT_NE(to_json(run).find("\"cold_l2\": true"), std::string::npos);
}

TEST(Report, AtomicWriteReplacesTheFile) {
  const std::string path = ::testing::TempDir() + "/bench_report_test.json";
  std::string error;
  ASSERT_TRUE(write_file_atomically(path, "one", error)) << error;
  ASSERT_TRUE(write_file_atomically(path, "two", error)) << error;
  std::FILE* f = std::fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char text[8] = {0};
  EXPECT_EQ(std::fread(text, 1, sizeof text - 1, f), 3u);
  std::fclose(f);
  EXPECT_STREQ(text, "two");
  std::remove(path.c_str());
  EXPECT_FALSE(write_file_atomically("/nonexistent-dir/x.json", "x", error));
  EXPECT_NE(error.find("/nonexistent-dir/x.json"), std::string::npos);
}

}  // namespace
}  // namespace epc::bench
