// SPDX-License-Identifier: Apache-2.0
// The low-latency phase trace as figures: per step, how long each phase between two stamped
// boundaries took (kernels/wire/ll_phase_trace.hpp), for the steps a timing just ran. The
// stamps exist only in builds configured with -Dphase_trace=true; this reading of them is pure
// CPU and built everywhere.
#pragma once

#include <string>

#include "bench/timing.hpp"
#include "kernels/wire/ll_phase_trace.hpp"

namespace epc::bench {

// Appends, for dispatch then combine, "ours.phase.<op>_<phase>" over the last `steps` steps
// of each operation the ring holds (counted back from the latest step with all five stamps;
// at most kLlPhaseTraceSteps). Phases, from one boundary to the next:
//   send     start -> payload sent (block 0's share of the payload stored and committed)
//   signal   payload sent -> signals sent (the other blocks finishing, the count tables, the
//            signals to every rank)
//   wait     signals sent -> wait done (block 0 of the receiving part has every rank's signal)
//   receive  wait done -> receive done (the last receiving block finished)
//   total    start -> receive done
// A step whose five stamps are not all of that step (it failed, or its stamps were not
// written yet) is left out. False with `problem` set when an operation has no complete step
// in that range.
bool phase_metrics(const kernels::LlPhaseTrace& trace, int steps, MetricList& out, std::string& problem);

}  // namespace epc::bench
