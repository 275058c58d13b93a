// SPDX-License-Identifier: Apache-2.0
// A hint that brings the line holding `address` into L2 without a register to receive it: a
// loop whose loads per lane are capped by registers can ask for the lines it reads next while
// it waits for the ones it reads now.
#pragma once

namespace epc::kernels {

__device__ __forceinline__ void prefetch_l2(const void* address) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(address));
}

}  // namespace epc::kernels
