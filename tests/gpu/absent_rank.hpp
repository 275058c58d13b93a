// SPDX-License-Identifier: Apache-2.0
// Never hang: what every present rank must see when the last rank stays away from a step,
// shared by the low-latency and high-throughput fault tests. The step's queued call succeeds,
// its kernel gives up after the group's timeout; epc_group_async_error reports that at once
// (it never waits), as soon as the kernel has recorded it (no stream synchronisation), and
// word for word as the next call does; the failure names the phase and the absent rank and
// stays until the group is destroyed.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "epcomm/epcomm.h"
#include "tests/gpu/gpu_case_common.hpp"

namespace epc::gputest {

// A group of `mode` whose waits give up after `timeout_ms`, split into virtual nodes of
// `virtual_node_size` ranks (0: none).
::testing::AssertionResult create_group_with_timeout(const Shape& shape, EpcMode mode, uint32_t timeout_ms,
                                                     GroupPtr& out, uint32_t virtual_node_size = 0);

struct AbsentRankStep {
  std::function<::testing::AssertionResult()> queue;  // the call the absent rank skips
  std::function<EpcStatus()> next;                    // the next call on the group
  std::function<EpcStatus()> again;                   // one more, which must fail the same way
  std::string phase;                                  // what the failure message names
};

// Run on every rank of the group (collective at the end: nobody releases its window while a
// peer's kernel could still write into it). `absent` queues nothing and must see no failure.
void expect_absent_rank_times_out(EpcGroup* group, cudaStream_t stream, int absent, const AbsentRankStep& step);

}  // namespace epc::gputest
