// SPDX-License-Identifier: Apache-2.0
// The staging map of a plan: which rows of which peer-written arrays a rank stages for the
// ranks of other nodes, laid out as kernels/wire/staging_map.hpp describes. Pure layout
// math, part of the planner.
#pragma once

#include "core/config.hpp"
#include "core/plan.hpp"
#include "core/topology.hpp"
#include "kernels/wire/staging_map.hpp"

namespace epc {

// The staging map of `plan`'s regions for topology `t` (node_size set), its offset still 0
// (the planner places the region last). Empty (count 0, no bytes) when every rank is in one
// node. Throws epc::Error (EPC_ERR_INVALID_ARGUMENT) when the staging would make the window
// larger than kMaxWindowBytes.
kernels::StagingMap plan_staging(const GroupConfig& config, const Topology& t, const Plan& plan);

}  // namespace epc
