// SPDX-License-Identifier: Apache-2.0
// Strict parsing of the numbers that flags and environment variables carry: the whole text
// must be the number, so "4x" or " 4" is rejected rather than read as 4.
#ifndef EPC_TESTS_GPU_HARNESS_NUMBER_PARSE_HPP
#define EPC_TESTS_GPU_HARNESS_NUMBER_PARSE_HPP

#include <string>

namespace epc::harness {

// A decimal integer in [min, max].
bool parse_int_in_range(const std::string& text, long min, long max, int& out);

// A finite, non-negative number of seconds ("3", "2.5").
bool parse_seconds(const std::string& text, double& out);

}  // namespace epc::harness

#endif  // EPC_TESTS_GPU_HARNESS_NUMBER_PARSE_HPP
