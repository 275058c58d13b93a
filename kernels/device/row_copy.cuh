// A warp copies one row in 16-byte vectors (rows are multiples of 16 bytes by the
// configuration rules), so each lane moves whole vectors and the warp's accesses coalesce.
#pragma once

#include "kernels/device/warp.cuh"

namespace epc::kernels {

__device__ __forceinline__ void warp_copy_row(void* dst, const void* src, int bytes) {
  const int4* s = static_cast<const int4*>(src);
  int4* d = static_cast<int4*>(dst);
  const int vectors = bytes / 16;
  for (int i = lane_id(); i < vectors; i += kWarpSize) d[i] = s[i];
}

}  // namespace epc::kernels
