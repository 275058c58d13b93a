// SPDX-License-Identifier: Apache-2.0
// A stand-in for an expert GEMM in the micro-batch timing (--micro-batches=2): a kernel that
// keeps `blocks` SMs busy for a chosen time. Each block takes all the shared memory an SM
// can give one block, so, like a GEMM's tiles, it leaves no room on its SM for another
// kernel's blocks; the other SMs stay free for communication.
#pragma once

#include <cuda_runtime.h>

namespace epc::bench {

// Queues the kernel on `stream`: `blocks` blocks (at least 1) that each spin for `us`
// microseconds of the GPU's global timer.
cudaError_t launch_gemm_stand_in(int blocks, int us, cudaStream_t stream);

}  // namespace epc::bench
