// SPDX-License-Identifier: Apache-2.0
// How many CUDA devices this process can see.
#ifndef EPC_TESTS_GPU_HARNESS_DEVICE_COUNT_HPP
#define EPC_TESTS_GPU_HARNESS_DEVICE_COUNT_HPP

#include <string>

#include "harness.hpp"

namespace epc::harness {

// Asks cudaGetDeviceCount; on failure `error` holds the CUDA error's name and text.
bool cuda_device_count(int& count, std::string& error);

// Options::device_count if set, else cuda_device_count. A count of 0 is reported as a
// failure too, with its own message, since callers treat both as "no GPU".
bool query_device_count(const Options& options, int& count, std::string& error);

}  // namespace epc::harness

#endif  // EPC_TESTS_GPU_HARNESS_DEVICE_COUNT_HPP
