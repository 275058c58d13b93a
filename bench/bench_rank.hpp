// SPDX-License-Identifier: Apache-2.0
// The body of one rank process (see tests/harness/harness.hpp for how ranks start).
#pragma once

#include "tests/harness/harness.hpp"

namespace epc::bench {

int rank_main(const harness::RankEnv& env, int argc, char** argv);

}  // namespace epc::bench
