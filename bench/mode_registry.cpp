#include <cstdio>

#include "bench/mode.hpp"
#include "epcomm/epcomm.h"

namespace epc::bench {

std::unique_ptr<Mode> make_mode(const Options& options, std::string& why) {
  if (options.mode == "ll") {
    if (!ll_dtype_supported(options.dtype, why)) return nullptr;
    return make_ll_mode();
  }
  if (options.mode == "ht") {
    char text[256];
    std::snprintf(text, sizeof text,
                  "--mode=ht: high-throughput dispatch/combine is not implemented yet in this "
                  "library version (epcomm ABI %d.%d.%d declares only low-latency calls); use "
                  "--mode=ll",
                  EPC_ABI_MAJOR, EPC_ABI_MINOR, EPC_ABI_PATCH);
    why = text;
    return nullptr;
  }
  why = "unknown mode '" + options.mode + "'";
  return nullptr;
}

}  // namespace epc::bench
