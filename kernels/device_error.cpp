#include "kernels/device_error.hpp"

namespace epc::kernels {

const char* phase_name(uint32_t phase) {
  switch (phase) {
    case kPhaseNone: return "none";
    case kPhaseGroupBarrier: return "group barrier";
    case kPhaseDispatchReceive: return "low-latency dispatch receive";
    case kPhaseCombineReceive: return "low-latency combine receive";
    case kPhaseRouting: return "routing check";
    default: return "unknown phase";
  }
}

}  // namespace epc::kernels
