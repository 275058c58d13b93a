// SPDX-License-Identifier: Apache-2.0
// Per-group device state of the low-latency mode. Step counters live on the device so that
// a captured CUDA graph advances them at every replay: each rank runs the same sequence of
// steps, so the counters agree across ranks without any host involvement. The "done"
// counters let the last block of a launch publish the launch's completion.
#pragma once

#include <cstdint>

namespace epc::kernels {

struct LlState {
  uint64_t dispatch_step;  // dispatches completed by this group; slot = step & 1
  uint64_t combine_step;
  uint32_t dispatch_send_done;  // blocks of the current launch that finished
  uint32_t dispatch_recv_done;
  uint32_t combine_send_done;
  uint32_t combine_recv_done;
};

}  // namespace epc::kernels
