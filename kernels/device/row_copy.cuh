// SPDX-License-Identifier: Apache-2.0
// Warp-wide row copies in 16-byte vectors (rows are multiples of 16 bytes by the
// configuration rules), so each lane moves whole vectors and the warp's accesses coalesce.
#pragma once

#include <cstdint>

#include "kernels/device/warp.cuh"

namespace epc::kernels {

// Vectors per lane loaded before any is stored: enough loads in flight to cover memory
// latency (a lane that loads one vector and waits before its store crawls).
constexpr int kRowSegment = 8;

enum class RowLoad { kReadOnly, kCoherent };  // __ldg for caller inputs; __ldcg for data peers wrote

template <RowLoad kLoad>
__device__ __forceinline__ int4 load_vector(const int4* p) {
  if (kLoad == RowLoad::kReadOnly) return __ldg(p);
  return __ldcg(p);
}

// Copies `vectors` 16-byte vectors from `src` to the destination row each lane named in
// `lanes` holds in `my_dst` (one row per set bit; lanes outside it may hold anything): every
// source vector is loaded once and stored to all of them. Every lane of the warp must call.
template <RowLoad kLoad>
__device__ __forceinline__ void warp_copy_row_to_lanes(const int4* src, int vectors, unsigned lanes, int4* my_dst) {
  const int lane = lane_id();
  for (int base = 0; base < vectors; base += kRowSegment * kWarpSize) {
    int4 v[kRowSegment];
#pragma unroll
    for (int u = 0; u < kRowSegment; ++u) {
      const int i = base + u * kWarpSize + lane;
      if (i < vectors) v[u] = load_vector<kLoad>(src + i);
    }
    for (unsigned rest = lanes; rest != 0; rest &= rest - 1) {
      const int owner = __ffs(rest) - 1;
      int4* dst = reinterpret_cast<int4*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(my_dst), owner));
#pragma unroll
      for (int u = 0; u < kRowSegment; ++u) {
        const int i = base + u * kWarpSize + lane;
        if (i < vectors) dst[i] = v[u];
      }
    }
  }
}

// One source row to one destination row.
template <RowLoad kLoad>
__device__ __forceinline__ void warp_copy_row_segmented(int4* dst, const int4* src, int vectors) {
  warp_copy_row_to_lanes<kLoad>(src, vectors, 1u, dst);
}

// Copies one row's scales (passthrough scales of any dtype and count) with the warp:
// 32-bit words where the byte count is a multiple of 4 (the host then requires 4-byte
// aligned scale tensors; slots are 16-byte aligned), else single bytes.
template <RowLoad kLoad>
__device__ __forceinline__ void warp_copy_scales(void* dst, const void* src, int bytes) {
  if (bytes % 4 == 0) {
    const uint32_t* from = static_cast<const uint32_t*>(src);
    uint32_t* to = static_cast<uint32_t*>(dst);
    for (int i = lane_id(); i < bytes / 4; i += kWarpSize)
      to[i] = kLoad == RowLoad::kReadOnly ? __ldg(from + i) : __ldcg(from + i);
  } else {
    const unsigned char* from = static_cast<const unsigned char*>(src);
    unsigned char* to = static_cast<unsigned char*>(dst);
    for (int i = lane_id(); i < bytes; i += kWarpSize)
      to[i] = kLoad == RowLoad::kReadOnly ? __ldg(from + i) : __ldcg(from + i);
  }
}

}  // namespace epc::kernels
