// SPDX-License-Identifier: Apache-2.0
#include "device_count.hpp"

#include <cuda_runtime_api.h>

namespace epc::harness {

bool cuda_device_count(int& count, std::string& error) {
  int found = 0;
  const cudaError_t status = cudaGetDeviceCount(&found);
  if (status != cudaSuccess) {
    error = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
    return false;
  }
  count = found;
  return true;
}

bool query_device_count(const Options& options, int& count, std::string& error) {
  int found = 0;
  const bool ok = options.device_count ? options.device_count(found, error) : cuda_device_count(found, error);
  if (!ok) return false;
  if (found <= 0) {
    error = "the CUDA runtime reports " + std::to_string(found) + " devices";
    return false;
  }
  count = found;
  return true;
}

}  // namespace epc::harness
