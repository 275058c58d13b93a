// SPDX-License-Identifier: Apache-2.0
// Counts read from the environment: the testing and tuning aids the planner reads
// (core/ht/ht_rings.hpp, core/ht/ht_parts.hpp).
#pragma once

#include <cstdint>

namespace epc {

// The value of the environment variable `name`, a decimal number from 0 to `most`;
// `fallback` where it is unset or empty. Throws EPC_ERR_INVALID_ARGUMENT naming the variable
// for anything else.
uint32_t env_count(const char* name, uint32_t fallback, uint32_t most);

}  // namespace epc
