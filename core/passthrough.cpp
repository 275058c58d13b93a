// SPDX-License-Identifier: Apache-2.0
#include "core/passthrough.hpp"

#include <cstdint>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/tensor_check.hpp"

namespace epc {

PassthroughPayload check_passthrough_inputs(const EpcDispatchArgs& a, int64_t B, int64_t H) {
  PassthroughPayload out;
  out.columns = H;
  const bool fp4 = a.x->dtype == EPC_DTYPE_FP4_E2M1X2;
  if (fp4) {
    if (H % 32 != 0) {
      fail_argument(
          format("EpcDispatchArgs.x is fp4 e2m1x2 but EpcGroupConfig.hidden is %lld; packed e2m1 rows need "
                 "hidden to be a multiple of 32 (16-byte rows)",
                 static_cast<long long>(H)));
    }
    out.columns = H / 2;
  } else if (a.x->dtype != EPC_DTYPE_FP8_E4M3 || H % 16 != 0) {
    fail_unsupported(
        format("EpcDispatchArgs.x: EPC_QUANT_PASSTHROUGH serves, in ABI %d.%d, fp8 e4m3 x [B, hidden] "
               "(hidden a multiple of 16) and fp4 e2m1x2 x [B, hidden / 2] (hidden a multiple of 32); "
               "got %s with hidden %lld",
               EPC_ABI_MAJOR, EPC_ABI_MINOR, dtype_name(a.x->dtype), static_cast<long long>(H)));
  }
  check_tensor(a.x, {"EpcDispatchArgs.x", {a.x->dtype}, {B, out.columns}});
  if (a.x_global_scale != nullptr) {
    if (!fp4) {
      fail_argument(
          format("EpcDispatchArgs.x_global_scale is NVFP4's per-tensor scale; with EPC_QUANT_PASSTHROUGH it goes "
                 "with fp4 e2m1x2 x only, and x is %s",
                 dtype_name(a.x->dtype)));
    }
    check_tensor(a.x_global_scale, {"EpcDispatchArgs.x_global_scale", {EPC_DTYPE_FP32}, {1}, 4});
  }
  if (a.x_scales == nullptr) fail_argument("EpcDispatchArgs.x_scales is NULL; EPC_QUANT_PASSTHROUGH needs it");
  if (a.out_scales == nullptr) fail_argument("EpcDispatchArgs.out_scales is NULL; EPC_QUANT_PASSTHROUGH needs it");
  out.scale_dtype = a.x_scales->dtype;
  const int64_t element = static_cast<int64_t>(dtype_size(out.scale_dtype));
  if (element == 0) {
    fail_argument(format("EpcDispatchArgs.x_scales has dtype %u, which is no EPC_DTYPE_*", out.scale_dtype));
  }
  if (a.x_scales->ndim != 2 || a.x_scales->shape[1] < 1) {
    fail_argument("EpcDispatchArgs.x_scales must be [B, S] with S >= 1 scales per row");
  }
  out.scale_count = a.x_scales->shape[1];
  // S is the caller's: bounded here, since check_tensor below measures no bytes when B is 0.
  if (__builtin_mul_overflow(out.scale_count, element, &out.scale_bytes) || out.scale_bytes > INT32_MAX) {
    fail_argument(format("EpcDispatchArgs.x_scales has %lld scales per row; their bytes pass 2^31 - 1",
                         static_cast<long long>(out.scale_count)));
  }
  // Whole 32-bit words of scales per row move as words (kernels/device/row_copy.cuh).
  out.scale_alignment = out.scale_bytes % 4 == 0 ? 4u : static_cast<uint32_t>(element);
  check_tensor(a.x_scales, {"EpcDispatchArgs.x_scales", {out.scale_dtype}, {B, out.scale_count}, out.scale_alignment});
  out.row = out.columns * static_cast<int64_t>(dtype_size(a.x->dtype));
  return out;
}

}  // namespace epc
