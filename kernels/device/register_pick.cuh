// SPDX-License-Identifier: Apache-2.0
// Element `i` of a small array held in registers. Indexing it with a value the compiler does
// not know (a loop counter of a loop it keeps rolled) puts the whole array in local memory
// and turns every access into a load; comparing against each constant index keeps it in
// registers.
#pragma once

namespace epc::kernels {

template <typename T, int N>
__device__ __forceinline__ T register_pick(const T (&values)[N], int i) {
  T picked = values[0];
#pragma unroll
  for (int k = 1; k < N; ++k) {
    if (k == i) picked = values[k];
  }
  return picked;
}

}  // namespace epc::kernels
