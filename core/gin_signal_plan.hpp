// SPDX-License-Identifier: Apache-2.0
// The GIN signal ids of a plan: which window words peers in other nodes signal, numbered
// as kernels/wire/gin_signal_map.hpp describes. Pure layout math, part of the planner.
#pragma once

#include <cstdint>

#include "core/config.hpp"
#include "core/plan.hpp"
#include "core/topology.hpp"
#include "kernels/wire/gin_signal_map.hpp"

namespace epc {

// NCCL 2.28.9 refuses a GIN signal pool of 2^30 signals or more (NCCL_GIN_SIGNAL_POOL_SIZE),
// so no plan may ask for that many.
constexpr uint64_t kMaxGinSignalIds = (uint64_t{1} << 30) - 1;

// The signal arrays of `plan`'s regions for topology `t` (node_size set). Empty (count 0)
// when every rank is in one node. Throws epc::Error (EPC_ERR_UNSUPPORTED) beyond
// kMaxGinSignalIds.
kernels::GinSignalMap plan_gin_signals(const GroupConfig& config, const Topology& t, const Plan& plan);

}  // namespace epc
