// SPDX-License-Identifier: Apache-2.0
// EPC_QUANT_PASSTHROUGH's inputs, checked alike in both modes: the caller's quantized rows
// (x), their scales (x_scales) and NVFP4's per-tensor scale (x_global_scale). Each mode then
// checks its own outputs and slot limit (core/ht/ht_handle.cpp, core/ll/ll_handle.cpp).
#pragma once

#include <cstdint>

#include "epcomm/epcomm.h"

namespace epc {

// One token's passthrough payload.
struct PassthroughPayload {
  int64_t row = 0;          // bytes of one row of x (and of out_x)
  int64_t columns = 0;      // x's and out_x's last extent: hidden, or hidden / 2 for e2m1
  int64_t scale_count = 0;  // S, x_scales' elements per row
  int64_t scale_bytes = 0;  // S * the element's bytes
  EpcDtype scale_dtype = EPC_DTYPE_INVALID;
  uint32_t scale_alignment = 1;  // of the scale tensors: 4 where a row's scale bytes are a
                                 // multiple of 4 (they move as 32-bit words), else the element's
};

// x: FP8_E4M3 [B, H] (H % 16 == 0) or FP4_E2M1X2 [B, H / 2] (H % 32 == 0); x_scales [B, S]
// of any dtype, S >= 1; out_scales present (its shape is the mode's); x_global_scale absent,
// or [1] fp32 with FP4_E2M1X2 x (checked, never sent: every rank holds the same). Throws
// INVALID_ARGUMENT or UNSUPPORTED naming the field.
PassthroughPayload check_passthrough_inputs(const EpcDispatchArgs& args, int64_t tokens, int64_t hidden);

}  // namespace epc
