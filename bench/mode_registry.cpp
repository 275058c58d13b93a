// SPDX-License-Identifier: Apache-2.0
#include "bench/mode.hpp"

namespace epc::bench {

std::unique_ptr<Mode> make_mode(const Options& options, std::string& why) {
  // Both modes carry bf16 and fp8 (LL: EPC_QUANT_FP8, HT: EPC_QUANT_PASSTHROUGH); the flags
  // already refused anything else.
  if (options.dtype != "bf16" && options.dtype != "fp8") {
    why = "unknown dtype '" + options.dtype + "'";
    return nullptr;
  }
  if (options.mode == "ll") return make_ll_mode();
  if (options.mode == "ht") return make_ht_mode();
  why = "unknown mode '" + options.mode + "'";
  return nullptr;
}

}  // namespace epc::bench
