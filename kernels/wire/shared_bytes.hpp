// SPDX-License-Identifier: Apache-2.0
// The dynamic shared memory of the launches that size it by the group (a word or two per
// rank, per local expert), defined once for the launches and for the planner, which refuses a
// group whose launches could not have it (core/planner.cpp) instead of letting them fail.
#pragma once

#include <cstddef>
#include <cstdint>

namespace epc::kernels {

// What a block may take in all without opting in to more (cudaFuncAttributeMax-
// DynamicSharedMemorySize), and what the kernels' own __shared__ arrays may take of it: the
// largest, HT's packed-row shifts (ht_packed_zones.cuh), are 8 KiB, in kernels that size
// nothing by the group.
constexpr size_t kBlockSharedLimit = size_t{48} << 10;
constexpr size_t kStaticSharedReserve = size_t{8} << 10;
constexpr size_t kDynamicSharedBudget = kBlockSharedLimit - kStaticSharedReserve;

// LL dispatch: the sending part's token place per rank, the receiving part's message count
// per rank (ll_dispatch_parts.cuh).
constexpr size_t ll_dispatch_shared_bytes(int nranks) { return static_cast<size_t>(nranks) * sizeof(uint32_t); }
// LL combine: the sending part's message and token counts per rank (ll_combine.cu).
constexpr size_t ll_combine_shared_bytes(int nranks) { return 2 * static_cast<size_t>(nranks) * sizeof(uint32_t); }
// HT layout: rows sent to and kept by each rank (ht_layout.cu).
constexpr size_t ht_layout_shared_bytes(int nranks) { return 2 * static_cast<size_t>(nranks) * sizeof(int32_t); }
// HT parts layout, steps in parts only: source bases [R + 1], totals [L], zones [L + 1]
// (ht_parts.cu).
constexpr size_t ht_parts_layout_shared_bytes(int nranks, int local_experts) {
  return (static_cast<size_t>(nranks) + 2 * static_cast<size_t>(local_experts) + 2) * sizeof(int32_t);
}

static_assert(ll_combine_shared_bytes(4096) <= kDynamicSharedBudget, "the largest one-node groups fit");

}  // namespace epc::kernels
