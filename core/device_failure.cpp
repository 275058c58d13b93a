// SPDX-License-Identifier: Apache-2.0
#include "core/device_failure.hpp"

#include "core/error.hpp"
#include "epcomm/epcomm.h"
#include "kernels/wire/device_error.hpp"
#include "kernels/wire/ll_message.hpp"

namespace epc {

std::string device_failure_message(const RecordedFailure& f, uint32_t num_experts, uint32_t timeout_ms) {
  const char* phase = kernels::phase_name(f.phase);
  const double waited_ms = static_cast<double>(f.waited_ns) / 1e6;
  if (f.phase == kernels::kPhaseRouting) {
    return format(
        "%s: rank %d was given an expert id outside [-1, %u) or more entries for one expert than it has rows; "
        "the group is unusable, destroy it",
        phase, f.rank, num_experts);
  }
  if (f.status == EPC_ERR_INTERNAL) {
    return format(
        "%s: rank %d found in its ring from rank %d a slot that the protocol never puts there (a bug in epcomm: "
        "please report it); the group is unusable, destroy it",
        phase, f.rank, f.peer);
  }
  if (f.phase == kernels::kPhaseDispatchReceive && kernels::ll_signal_of_other_kind(f.seen, f.wanted)) {
    // A rank given another step bound than its peers moves the step the other way, and its
    // signal carries the step's epoch of that kind (kernels/ll/ll_dispatch_lines.cuh).
    const bool lines_here = (f.wanted & kernels::kLlLineEpochBit) != 0;
    return format(
        "%s: rank %d waited %.0f ms for rank %d, whose signal says it moved this step as %s, and rank %d as %s: "
        "the ranks were given different EpcDispatchArgs.max_step_tokens (every rank must pass the same); the "
        "group is unusable, destroy it",
        phase, f.rank, waited_ms, f.peer, lines_here ? "records" : "line records", f.rank,
        lines_here ? "line records" : "records");
  }
  return format(
      "%s: rank %d waited %.0f ms for rank %d, which did not arrive (timeout %u ms); the group is unusable, "
      "destroy it",
      phase, f.rank, waited_ms, f.peer, timeout_ms);
}

}  // namespace epc
