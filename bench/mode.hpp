// SPDX-License-Identifier: Apache-2.0
// A measured mode of the library (LL: ll_mode.cpp, HT: ht_mode.cpp). The driver
// (bench_rank.cpp) runs the same sweep, baseline and ceiling for every mode; a mode only
// brings up its group and times its own dispatch and combine. Add a mode by implementing
// this interface in bench/<mode>_mode.cpp and naming it in mode_registry.cpp.
#pragma once

#include <memory>
#include <string>

#include "bench/kernel_tracer.hpp"
#include "bench/options.hpp"
#include "bench/rank_session.hpp"
#include "bench/record.hpp"
#include "bench/routing.hpp"
#include "bench/timing.hpp"
#include "bench/traffic.hpp"

namespace epc::bench {

class L2Sweep;

struct PointInput {
  int tokens = 0;
  int warmup = 0;                                     // untimed steps before each measurement (Options::warmup_at)
  int iters = 0;                                      // timed steps per measurement (Options::iters_at)
  const Routing* routing = nullptr;                   // this rank's [tokens, topk]
  const std::vector<Routing>* all_routing = nullptr;  // every rank's, rank r's at index r
  const RankTraffic* traffic = nullptr;               // this rank's, with the expected counts
  // CUPTI's kernel records, when every rank could open them (--cupti); else nullptr.
  KernelTracer* tracer = nullptr;
  // --cold-l2: swept before every dispatch of ours the kernel, CUPTI and graph timings run
  // (bench/l2_sweep.hpp); else nullptr.
  const L2Sweep* sweep = nullptr;
};

class Mode {
 public:
  virtual ~Mode() = default;
  // Collective. Creates the group sized for options.group_max_tokens().
  virtual bool setup(RankSession& session, const Options& options, std::string& error) = 0;
  virtual GroupFacts facts() const = 0;
  virtual WireFormat wire() const = 0;
  // Collective. Appends this rank's "ours.*" figures; `counts_ok` says whether dispatch
  // delivered exactly the expected rows to every local expert.
  virtual bool measure(const PointInput& in, MetricList& out, bool& counts_ok, std::string& error) = 0;
  // Collective. Releases the group.
  virtual void teardown() = 0;
};

// The mode --mode and --dtype ask for, or nullptr with `why` saying why this library version
// cannot run it. Pure CPU: the launcher calls it before starting any rank.
std::unique_ptr<Mode> make_mode(const Options& options, std::string& why);

std::unique_ptr<Mode> make_ll_mode();
std::unique_ptr<Mode> make_ht_mode();

}  // namespace epc::bench
