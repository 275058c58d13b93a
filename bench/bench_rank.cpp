// SPDX-License-Identifier: Apache-2.0
// One rank of the benchmark: brings up the mode's group, the baseline and the ceiling, then
// for every point measures all three on the same routing and gathers the figures; rank 0
// records, reports progress and rewrites the outputs after every point.
#include "bench/bench_rank.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "bench/cupti_timing.hpp"
#include "bench/gather.hpp"
#include "bench/ht_capacity_check.hpp"
#include "bench/l2_sweep.hpp"
#include "bench/latency_floor.hpp"
#include "bench/lsa_ceiling.hpp"
#include "bench/machine.hpp"
#include "bench/memory_copy.hpp"
#include "bench/mode.hpp"
#include "bench/nccl_baseline.hpp"
#include "bench/output.hpp"

namespace epc::bench {
namespace {

class Driver {
 public:
  Driver(RankSession& session, const Options& options, Mode& mode, const std::string& command)
      : s_(session), o_(options), mode_(mode), out_(options) {
    run_.options = options;
    run_.command = command;
    run_.created_utc = utc_now();
    run_.nranks = session.nranks();
#ifdef EPC_PHASE_TRACE
    run_.phase_trace = true;
#endif
  }

  int run() {
    const Clock::time_point start = Clock::now();
    if (!setup()) return 1;
    std::string bounds;
    if (run_.ceiling_peak) bounds += ", ceiling " + fixed(run_.ceiling_peak->egress_GBps(), 1) + " GB/s egress";
    if (run_.memory_copy) bounds += ", memory copy " + fixed(run_.memory_copy->copy_GBps(), 1) + " GB/s";
    if (run_.floor) bounds += ", floor step " + fixed(run_.floor->step.slowest.median_us, 1) + " us";
    say("%d ranks ready in %.1f s: symmetric memory %.1f MiB per GPU (the plan's %.1f MiB)%s", s_.nranks(),
        us_between(start, Clock::now()) / 1e6, static_cast<double>(run_.group.symmetric_bytes) / (1 << 20),
        static_cast<double>(run_.group.planned_symmetric_bytes) / (1 << 20), bounds.c_str());
    for (size_t i = 0; i < o_.tokens.size(); ++i) {
      const Clock::time_point t0 = Clock::now();
      if (!point(o_.tokens[i])) return 1;
      if (s_.rank() == 0) progress_line(i, us_between(t0, Clock::now()) / 1e6);
    }
    run_.complete = true;
    if (s_.rank() == 0) {
      std::string error;
      if (!out_.write(run_, error)) {
        std::fprintf(stderr, "epcomm-bench: %s\n", error.c_str());
        write_failed_ = true;
      }
      out_.finish(run_);
    }
    return 0;
  }

  // Rank 0 could not write an output file: every rank still finishes and tears down
  // normally, but the run's exit status says so.
  bool write_failed() const { return write_failed_; }

  ~Driver() {
    ceiling_.teardown();
    baseline_.teardown();
    mode_.teardown();
  }

 private:
  template <typename... Args>
  void say(const char* format, Args... args) {
    if (s_.rank() != 0) return;
    char text[512];
    std::snprintf(text, sizeof text, format, args...);
    out_.progress(text);
  }

  static std::string fixed(double v, int digits) {
    if (!std::isfinite(v)) return "-";
    char text[32];
    std::snprintf(text, sizeof text, "%.*f", digits, v);
    return text;
  }

  // Every rank learns whether every rank succeeded, and each prints its own failure. Every
  // rank calls this equally often (a collective), so a failed rank is never left behind.
  bool agree(bool mine, const std::string& what) {
    const bool all = s_.all_true(mine);
    if (!mine) {
      std::fprintf(stderr, "epcomm-bench: rank %d failed %s: %s\n", s_.rank(), what.c_str(), error_.c_str());
    } else if (!all) {
      std::fprintf(stderr, "epcomm-bench: rank %d stops: another rank failed %s\n", s_.rank(), what.c_str());
    }
    return all;
  }

  // Ranks per node as our group uses them (--virtual-node-size, else the NVLink team).
  int node_size() const {
    const int nodes = run_.group.num_nodes > 0 ? static_cast<int>(run_.group.num_nodes) : 1;
    return s_.nranks() / nodes;
  }

  bool setup() {
    if (!agree(mode_.setup(s_, o_, error_), "to create its group")) return false;
    run_.group = mode_.facts();
    run_.wire = mode_.wire();
    // The network byte counts assume the library's receive slots (bench/tests/test_traffic.cpp
    // checks them against the planner); refuse to report wrong ones if they drift apart.
    if (node_size() < s_.nranks() &&
        static_cast<int64_t>(run_.group.message_bytes) != run_.wire.net_dispatch_message_bytes) {
      error_ = "the library's dispatch message is " + std::to_string(run_.group.message_bytes) +
               " B but bench/traffic.cpp counts " + std::to_string(run_.wire.net_dispatch_message_bytes) +
               " B: update WireFormat (kernels/wire/ll_message.hpp, kernels/wire/ht_message.hpp)";
      return agree(false, "to match the library's message size");
    }
    if (!agree(describe_machine(s_, run_.machine, error_), "to describe its GPU")) return false;
    if (o_.baseline && !agree(baseline_.setup(s_, o_, error_), "to set up the baseline")) return false;
    if (o_.ceiling && s_.nranks() > 1 && !setup_ceiling()) return false;
    if (!setup_memory_copy()) return false;
    if (o_.cold_l2 && !agree(sweep_.open(error_), "to allocate the L2 sweep (--cold-l2)")) return false;
    setup_cupti();
    return !run_.cupti.active || o_.mode != "ll" || measure_floor();
  }

  // Collective. The latency floor on our LL grid, kept when every rank measured it.
  bool measure_floor() {
    const int blocks = static_cast<int>(run_.group.num_sms);
    const int iters = std::max(10, std::min(o_.iters, 200));
    Summary call, step, routed_row, graph_call, graph_step;
    std::string problem;
    const RoutedRowShape shape{o_.hidden, o_.topk, o_.experts};
    if (!agree(measure_latency_floor(s_, tracer_, o_.cold_l2 ? &sweep_ : nullptr, blocks, iters, shape, call, step,
                                     routed_row, graph_call, graph_step, problem, error_),
               "to measure the latency floor")) {
      return false;
    }
    MetricList kept;
    keep_if_every_rank_has(s_, "latency floor",
                           {{"floor.call", call},
                            {"floor.step", step},
                            {"floor.routed_row", routed_row},
                            {"floor.graph_call", graph_call},
                            {"floor.graph_step", graph_step}},
                           problem, kept);
    if (kept.empty()) return true;
    std::vector<Metric> all;
    if (!agree(gather_metrics(s_, kept, all, error_), "to gather the latency floor")) return false;
    run_.floor =
        LatencyFloor{blocks, ll_block_threads(), all[0].value, all[1].value, all[2].value, all[3].value, all[4].value};
    return true;
  }

  // Collective. The device-memory copy bandwidth the roofline divides by, kept when every
  // rank measured it.
  bool setup_memory_copy() {
    Summary mine;
    std::string problem;
    if (!agree(measure_memory_copy(s_, kMemoryCopyBytes, 3, 20, mine, problem, error_),
               "to time a device-memory copy")) {
      return false;
    }
    MetricList kept;
    keep_if_every_rank_has(s_, "device-memory copy bandwidth (so no roofline)", {{"memory.copy", mine}}, problem, kept);
    if (kept.empty()) return true;
    std::vector<Metric> all;
    if (!agree(gather_metrics(s_, kept, all, error_), "to gather the copy bandwidth")) return false;
    run_.memory_copy = MemoryCopy{kMemoryCopyBytes, all[0].value};
    return true;
  }

  // Collective. Kernel spans are recorded only when every rank can record them (every rank
  // must report the same figures). Without them the run goes on: one line says why, from
  // rank 0 when it failed itself, else from the ranks that did.
  void setup_cupti() {
    if (!o_.cupti) {
      run_.cupti.why_not = "--cupti=off";
      return;
    }
    std::string why;
    const bool mine = tracer_.open(why);
    const bool everyone = s_.all_true(mine);
    const bool rank0 = s_.all_true(s_.rank() != 0 || mine);
    run_.cupti.active = everyone;
    run_.cupti.library = tracer_.library();
    if (everyone) return;
    run_.cupti.why_not = mine ? "another rank could not use CUPTI" : why;
    if (mine || (s_.rank() != 0 && !rank0)) return;
    if (s_.rank() == 0) {
      out_.progress("kernel spans (the cupti columns) are off: " + why);
    } else {
      std::fprintf(stderr, "epcomm-bench: rank %d: kernel spans (the cupti columns) are off: %s\n", s_.rank(),
                   why.c_str());
    }
  }

  bool setup_ceiling() {
    const int64_t peak = static_cast<int64_t>(o_.ceiling_peak_mib) << 20;
    // The most one rank can send one peer at the largest point: every token with all its
    // entries there (across nodes in HT, also every token it forwards there).
    const int64_t point_max = run_.wire.max_bytes_to_peer(o_.group_max_tokens(), o_.topk, s_.nranks(), node_size());
    if (!agree(ceiling_.setup(s_, std::max(peak, point_max), o_.timeout_ms, error_), "to set up the ceiling")) {
      return false;
    }
    Summary mine;
    const int iters = std::max(10, std::min(o_.iters, 100));
    if (!agree(ceiling_.measure_peak(peak, 5, iters, mine, error_), "to measure the peak ceiling")) {
      return false;
    }
    std::vector<Metric> all;
    if (!agree(gather_metrics(s_, {{"ceiling.peak", mine}}, all, error_), "to gather the ceiling")) {
      return false;
    }
    CeilingPeak c;
    c.bytes_per_peer = peak;
    c.peers = s_.nranks() - 1;
    c.time = all[0].value;
    run_.ceiling_peak = c;
    return true;
  }

  bool point(int tokens) {
    const int R = s_.nranks();
    const std::vector<Routing> routing = make_all_routing(o_.routing, R, tokens, o_.topk, o_.experts);
    PointResult result;
    result.tokens = tokens;
    result.warmup = o_.warmup_at(tokens);
    result.iters = o_.iters_at(tokens);
    // LL's out_x holds R * max_tokens rows per expert; HT's rows have no per-expert cap.
    const int64_t capacity = run_.wire.ht ? INT64_MAX : static_cast<int64_t>(R) * o_.group_max_tokens();
    for (int r = 0; r < R; ++r) {
      result.traffic.push_back(
          compute_traffic(routing, r, tokens, o_.topk, o_.experts, run_.wire, capacity, node_size()));
    }
    // Rows past a receive window below R * T (--capacity-factor), as the reference model
    // drops them; every rank computes the same from every rank's routing.
    if (run_.wire.ht && o_.capacity_factor < 1.0 &&
        !agree(
            ht_dropped_rows(routing, tokens, o_.topk, o_.experts, ht_recv_capacity(o_, R), result.dropped_rows, error_),
            "to count the dropped rows at " + std::to_string(tokens) + " tokens per rank")) {
      return false;
    }
    if (result.dropped_rows.empty()) result.dropped_rows.assign(static_cast<size_t>(R), 0);
    PointInput in;
    in.tokens = tokens;
    in.warmup = result.warmup;
    in.iters = result.iters;
    in.routing = &routing[static_cast<size_t>(s_.rank())];
    in.all_routing = &routing;
    in.traffic = &result.traffic[static_cast<size_t>(s_.rank())];
    in.tracer = run_.cupti.active ? &tracer_ : nullptr;
    in.sweep = o_.cold_l2 ? &sweep_ : nullptr;

    const std::string what = "at " + std::to_string(tokens) + " tokens per rank";
    MetricList mine;
    bool checked = false;
    if (!agree(mode_.measure(in, mine, checked, error_), "our dispatch/combine " + what)) return false;
    if (o_.baseline && !agree(baseline_.measure(in, mine, error_), "the baseline " + what)) return false;
    if (o_.ceiling && R > 1) {
      if (!agree(ceiling_.measure_point(*in.traffic, in.warmup, in.iters, "ceiling", 0, mine, error_),
                 "the ceiling " + what)) {
        return false;
      }
      // With our SM budget too, when it leaves SMs unused.
      const int budget = static_cast<int>(run_.group.num_sms);
      if (budget > 0 && budget < ceiling_.device_sms() &&
          !agree(ceiling_.measure_point(*in.traffic, in.warmup, in.iters, "ceiling_budget", budget, mine, error_),
                 "the ceiling at our SM budget " + what)) {
        return false;
      }
    }
    if (!agree(gather_metrics(s_, mine, result.metrics, error_), "to gather figures " + what)) return false;
    result.output_checked = s_.all_true(checked);
    if (s_.rank() == 0) {
      run_.points.push_back(result);
      std::string error;
      if (!out_.write(run_, error) && !write_failed_) {
        // The other ranks need not stop for it; the exit status will say so.
        std::fprintf(stderr, "epcomm-bench: %s\n", error.c_str());
        write_failed_ = true;
      }
    }
    return true;
  }

  void progress_line(size_t index, double seconds) {
    const PointResult& p = run_.points.back();
    std::string extra;
    if (p.find("ours.api.layout") != nullptr) extra += ", layout " + fixed(p.median_us("ours.api.layout"), 1) + " us";
    if (p.find("ours.cupti.step") != nullptr) extra += ", GPU time " + fixed(p.median_us("ours.cupti.step"), 1) + " us";
    if (p.find("ceiling_budget.kernel.step") != nullptr) {
      extra += ", ceiling at " + std::to_string(run_.group.num_sms) + " SMs " +
               fixed(p.median_us("ceiling_budget.kernel.step"), 1) + " us";
    }
    say("point %zu/%zu, %d tokens per rank: ours step %s us (dispatch %s, combine %s), baseline %s us, "
        "ceiling %s us%s, ours/baseline %s [%.1f s]",
        index + 1, o_.tokens.size(), p.tokens, fixed(p.median_us("ours.kernel.step"), 1).c_str(),
        fixed(p.median_us("ours.kernel.dispatch"), 1).c_str(), fixed(p.median_us("ours.kernel.combine"), 1).c_str(),
        fixed(p.median_us("baseline.kernel.step"), 1).c_str(), fixed(p.median_us("ceiling.kernel.step"), 1).c_str(),
        extra.c_str(), fixed(ratio(p, "ours.kernel.step", "baseline.kernel.step"), 2).c_str(), seconds);
  }

  RankSession& s_;
  const Options o_;
  Mode& mode_;
  Output out_;
  NcclBaseline baseline_;
  LsaCeiling ceiling_;
  KernelTracer tracer_;
  L2Sweep sweep_;
  RunRecord run_;
  std::string error_;
  bool write_failed_ = false;
};

}  // namespace

int rank_main(const harness::RankEnv& env, int argc, char** argv) {
  Options options;
  std::string error;
  if (!parse_options(argc, argv, options, error)) {
    std::fprintf(stderr, "epcomm-bench: %s\n", error.c_str());
    return 2;
  }
  // Another launcher may have started a world the node size does not divide (ours checks
  // first). Every rank refuses alike; rank 0 says why.
  if (!check_virtual_node_size(options, env.world_size, error)) {
    if (env.rank == 0) std::fprintf(stderr, "epcomm-bench: %s\n", error.c_str());
    return 2;
  }
  std::string why;
  std::unique_ptr<Mode> mode = make_mode(options, why);
  if (!mode) {
    std::fprintf(stderr, "epcomm-bench: %s\n", why.c_str());
    return 1;
  }
  RankSession session;
  if (!session.open(env, error)) {
    std::fprintf(stderr, "epcomm-bench: rank %d: %s\n", env.rank, error.c_str());
    return 1;
  }
  bool write_failed = false;
  {
    // The driver ends before the session: its destructor releases groups and windows that
    // live on the session's communicator.
    Driver driver(session, options, *mode, joined_command(argc, argv));
    const int code = driver.run();
    if (code != 0) {
      // Releasing groups, windows and the communicator is collective: after a failure a
      // peer may never join, so leave without it (the driver frees a process's GPU memory).
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(code);
    }
    write_failed = driver.write_failed();
  }
  return write_failed ? 1 : 0;
}

}  // namespace epc::bench
