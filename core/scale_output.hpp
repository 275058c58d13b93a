// SPDX-License-Identifier: Apache-2.0
// The out_scales of a dispatch that carries scales (the fp8 cast's, or a passthrough's
// caller-made ones): which encodings and strides are served, checked at the ABI, and the
// kernels' description of it (kernels/wire/scale_output.hpp).
#pragma once

#include <cstdint>

#include "epcomm/epcomm.h"
#include "kernels/wire/scale_output.hpp"

namespace epc {

// out_scales for `experts` x `rows` rows of `scales` scale blocks each: FP32 [experts, rows,
// scales], E8M0 [experts, rows, scales] or E8M0X4 [experts, rows, ceil(scales / 4)], with
// any strides under which no two elements share memory (row-major, column-major over rows,
// rows padded for TMA, ...). Throws EPC_ERR_INVALID_ARGUMENT naming the field otherwise.
kernels::ScaleOutput fp8_scale_output(const EpcTensor* out_scales, int64_t experts, int64_t rows, int64_t scales);
// The same for a 2-D out_scales [rows, scales] (words as above); expert_stride is 0.
kernels::ScaleOutput fp8_scale_output_rows(const EpcTensor* out_scales, int64_t rows, int64_t scales);

// EPC_QUANT_PASSTHROUGH's out_scales: `scales` elements per row of `dtype` (x_scales'),
// copied as they are, [experts, rows, scales] with the strides rule above. Elements of 1, 2
// or 4 bytes are served (8-byte ones: EPC_ERR_UNSUPPORTED).
kernels::ScaleOutput passthrough_scale_output(const EpcTensor* out_scales, EpcDtype dtype, int64_t experts,
                                              int64_t rows, int64_t scales);
// The same for a 2-D out_scales [rows, scales]; expert_stride is 0.
kernels::ScaleOutput passthrough_scale_output_rows(const EpcTensor* out_scales, EpcDtype dtype, int64_t rows,
                                                   int64_t scales);

}  // namespace epc
