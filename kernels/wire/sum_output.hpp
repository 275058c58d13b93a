// SPDX-License-Identifier: Apache-2.0
// The element type a combine writes its fp32 sums as (EpcCombineArgs.out's dtype): one
// enum shared by the core, which picks it, and the kernels, which store it.
#pragma once

#include <cstdint>

namespace epc::kernels {

enum class SumOutput : int32_t {
  kBf16 = 0,  // rounded once to bf16
  kFp16 = 1,  // rounded once to fp16
  kFp32 = 2,  // the fp32 sum itself
};

// Bytes of one element of `type`.
constexpr int sum_output_bytes(SumOutput type) { return type == SumOutput::kFp32 ? 4 : 2; }

}  // namespace epc::kernels
