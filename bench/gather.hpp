// SPDX-License-Identifier: Apache-2.0
// Bringing every rank's figures to every rank (an all-gather; rank 0 reports them).
#pragma once

#include <string>
#include <vector>

#include "bench/rank_session.hpp"
#include "bench/record.hpp"
#include "bench/timing.hpp"

namespace epc::bench {

// Collective. Every rank must pass the same metric names in the same order (checked: a
// mismatch is an error, not a silently misaligned table).
bool gather_metrics(RankSession& session, const MetricList& mine, std::vector<Metric>& out, std::string& error);

// The order-sensitive fingerprint of the names (FNV-1a), exposed for tests.
uint64_t names_fingerprint(const MetricList& metrics);

}  // namespace epc::bench
