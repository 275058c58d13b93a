// SPDX-License-Identifier: Apache-2.0
// main() of the test programs that run device parts on one GPU without NCCL
// (epcomm-ring-tests, epcomm-parts-tests): GoogleTest where a GPU is visible, else Meson's
// "skipped" (77) with a message naming the program.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    cudaGetLastError();
    const char* slash = argc > 0 ? std::strrchr(argv[0], '/') : nullptr;
    const char* name = argc > 0 ? (slash != nullptr ? slash + 1 : argv[0]) : "this program";
    std::printf("SKIP: no CUDA GPU visible; %s needs one\n", name);
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
