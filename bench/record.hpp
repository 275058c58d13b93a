// SPDX-License-Identifier: Apache-2.0
// Everything one run measured, as rank 0 holds it after gathering every rank's figures, and
// the figures derived from it (bandwidths, ratios). The JSON and the table are two views of
// this record. Pure CPU.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "bench/options.hpp"
#include "bench/stats.hpp"
#include "bench/traffic.hpp"

namespace epc::bench {

// A timed quantity, named "<who>.<how>.<what>": who is ours, baseline, ceiling (every SM) or
// ceiling_budget (our SM budget); how is kernel (CUDA events), api (host wall clock through
// the call until the stream is done), graph (replay of a captured graph, per step), cupti
// (CUPTI's kernel records: the GPU time of what a call or step launched) or cupti_graph (the
// same per step of a graph replay). bench/JSON.md lists every name.
struct Metric {
  std::string name;
  AcrossRanks value;
};

struct PointResult {
  int tokens = 0;
  int warmup = 0;                    // untimed steps before each measurement at this point
  int iters = 0;                     // timed steps per measurement
  std::vector<RankTraffic> traffic;  // per rank
  std::vector<Metric> metrics;
  // Our dispatch delivered the expected rows per expert and combine the expected sums
  // (bench/output_check.hpp); a point with wrong results is not recorded at all.
  bool output_checked = false;
  // HT with --capacity-factor below 1: rows each rank's window dropped or, under
  // --overflow=fail, would drop (the reference model's count; [ranks], 0 elsewhere).
  std::vector<int64_t> dropped_rows;

  const AcrossRanks* find(const std::string& name) const;
  double median_us(const std::string& name) const;  // NaN when absent
};

struct CeilingPeak {
  int64_t bytes_per_peer = 0;
  int peers = 0;
  AcrossRanks time;
  double egress_GBps() const;  // per GPU: bytes to all peers over the slowest median
};

// The device-memory copy bandwidth of this run's GPUs (bench/memory_copy.hpp): `bytes`
// copied from one device buffer to another, timed.
struct MemoryCopy {
  int64_t bytes = 0;
  AcrossRanks time;
  // Bytes read and written per second (2 x bytes over the slowest median), in GB/s: the
  // rate device memory serves a copy, in the units the roofline divides by.
  double copy_GBps() const;
};

struct GpuInfo {
  int rank = 0;
  int device = 0;
  std::string name;
  std::string pci_bus_id;
};

struct MachineInfo {
  std::string hostname;
  std::vector<GpuInfo> gpus;
  std::string nccl_runtime;  // "2.28.9"
  std::string nccl_headers;  // the version epcomm was compiled against
  std::string nccl_library;  // path of the libnccl that was loaded
  std::string cuda_driver;   // CUDA driver API version, "13.0"
  std::string cuda_runtime;
  std::string nvidia_driver;  // kernel module version, "570.86.15", or "unknown"
  std::string epcomm_abi;     // "1.0.0"
  std::string epcomm_commit;  // the bench's build commit (git describe), "unknown" outside git
};

struct GroupFacts {
  uint64_t symmetric_bytes = 0;
  // What epc_plan_query gives for the same configuration and topology: equal to
  // symmetric_bytes unless the library's window and its planner disagree.
  uint64_t planned_symmetric_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint32_t message_bytes = 0;
  uint32_t num_sms = 0;
  uint32_t local_experts = 0;
  uint32_t max_tokens = 0;
  // Nodes as the group uses them (EpcGroupInfo.num_nodes): ranks / node size, where a node is
  // the NVLink team or, with --virtual-node-size, a virtual node. 0: not known (treated as 1).
  uint32_t num_nodes = 0;
  uint64_t recv_capacity = 0;  // EpcGroupInfo.recv_capacity: rows the receive window holds (HT)
};

// Whether the kernel spans ("cupti" metrics) were recorded, and if not why.
struct CuptiStatus {
  bool active = false;  // every rank recorded CUPTI's kernel records
  std::string library;  // rank 0's CUPTI, when active
  std::string why_not;  // when not: "--cupti=off", or why CUPTI could not be used
};

// The latency floor (bench/latency_floor.hpp): once per low-latency run with kernel spans.
struct LatencyFloor {
  int blocks = 0;  // the grid of our LL launches
  int threads = 0;
  AcrossRanks call;        // one empty kernel
  AcrossRanks step;        // two empty kernels back to back
  AcrossRanks routed_row;  // one token's row stored into its top-k experts' rows
  AcrossRanks graph_call;  // one empty kernel inside a graph's replay
  AcrossRanks graph_step;  // two empty kernels back to back inside a graph's replay
};

struct RunRecord {
  bool format_sample = false;  // true only for bench/samples: invented numbers
  std::string command;
  std::string created_utc;
  Options options;
  int nranks = 0;
  MachineInfo machine;
  GroupFacts group;
  WireFormat wire;
  std::optional<CeilingPeak> ceiling_peak;
  std::optional<MemoryCopy> memory_copy;
  CuptiStatus cupti;
  bool phase_trace = false;  // built with -Dphase_trace=true: LL kernels stamp their phases
  std::optional<LatencyFloor> floor;
  std::vector<PointResult> points;
  bool complete = false;  // every requested point was measured
};

// GB/s (1e9 bytes per second) of `bytes` in `us` microseconds; NaN if `us` is not positive.
double gbps(double bytes, double us);

// Mean over ranks of one RankTraffic field.
double mean_bytes(const PointResult& p, int64_t RankTraffic::* field);

struct Bandwidth {
  double logical_GBps;
  double wire_GBps;
  double wire_over_ceiling;  // wire over the run's peak ceiling; NaN without one
};

// who: "ours", "baseline", "ceiling" or "ceiling_budget"; op: "dispatch" or "combine". Bytes
// are the mean over ranks, time the slowest rank's median kernel time of that op.
Bandwidth bandwidth(const RunRecord& run, const PointResult& p, const std::string& who, const std::string& op);

// The least time an op can take on these GPUs, from its bytes and this run's measured
// bandwidths (bench/JSON.md, "roofline"): the op's device-memory bytes (RankTraffic::
// memory_*) over the copy bandwidth, and its wire bytes over the NVLink egress of the
// ceiling peak; the larger of the two (either alone when the other's bandwidth was not
// measured). Bytes are the largest over ranks: a collective op waits for its slowest rank.
struct Roofline {
  double memory_bytes = 0;
  double wire_bytes = 0;
  double memory_us = std::numeric_limits<double>::quiet_NaN();  // without a memory copy measurement
  double wire_us = std::numeric_limits<double>::quiet_NaN();    // without a ceiling peak (one rank, --ceiling=off)
  double us = std::numeric_limits<double>::quiet_NaN();         // when neither is known
};
// op: "dispatch" or "combine".
Roofline roofline(const RunRecord& run, const PointResult& p, const std::string& op);
// Dispatch's and combine's added (a step runs one after the other); NaN when either is.
double roofline_step_us(const RunRecord& run, const PointResult& p);

// a's median over b's; NaN when either is missing.
double ratio(const PointResult& p, const std::string& a, const std::string& b);

std::string utc_now();

}  // namespace epc::bench
