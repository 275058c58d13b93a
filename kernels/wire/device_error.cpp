// SPDX-License-Identifier: Apache-2.0
#include "kernels/wire/device_error.hpp"

namespace epc::kernels {

const char* phase_name(uint32_t phase) {
  switch (phase) {
    case kPhaseNone:
      return "none";
    case kPhaseGroupBarrier:
      return "group barrier";
    case kPhaseDispatchReceive:
      return "low-latency dispatch receive";
    case kPhaseCombineReceive:
      return "low-latency combine receive";
    case kPhaseRouting:
      return "routing check";
    case kPhaseHtLayout:
      return "high-throughput layout (count exchange)";
    case kPhaseHtDispatch:
      return "high-throughput dispatch";
    case kPhaseHtCombine:
      return "high-throughput combine";
    case kPhaseLlDispatchSlot:
      return "low-latency dispatch slot reuse (a peer has not freed the slot's previous step)";
    case kPhaseLlCombineSlot:
      return "low-latency combine slot reuse (a peer has not freed the slot's previous step)";
    case kPhaseHtRingSpace:
      return "high-throughput ring space (the reader has not freed a slot)";
    case kPhaseHtRingData:
      return "high-throughput ring data (the writer has not published the next slot)";
    default:
      return "unknown phase";
  }
}

}  // namespace epc::kernels
