// SPDX-License-Identifier: Apache-2.0
// The high-throughput calls: argument checks and marshalling only.
#include "capi/call_guard.hpp"
#include "capi/handles.hpp"

using epc::capi::guarded;
using epc::capi::ht_handle_of;

extern "C" {

EpcStatus epc_ht_handle_create(EpcGroup* group, const EpcTensor* topk_idx, EpcHtSizing sizing, void* stream,
                               EpcHandle** out_handle, int64_t* out_rows) {
  return guarded([&] {
    epc::Group& g = epc::capi::group_of(group);
    if (out_handle == nullptr) epc::fail_argument("out_handle is NULL");
    if (out_rows == nullptr) epc::fail_argument("out_rows is NULL");
    if (g.config().mode != EPC_MODE_HIGH_THROUGHPUT) {
      epc::fail_argument(
          "epc_ht_handle_create: the group is in low-latency mode; create its "
          "handles with epc_handle_create");
    }
    if (sizing != EPC_HT_SIZING_EXACT && sizing != EPC_HT_SIZING_CAPACITY) {
      epc::fail_argument(
          epc::format("epc_ht_handle_create: sizing is %u; expected "
                      "EPC_HT_SIZING_EXACT (0) or EPC_HT_SIZING_CAPACITY (1)",
                      sizing));
    }
    auto handle = std::make_unique<EpcHandle>();
    handle->ht = std::make_unique<epc::HtHandle>(g, epc::capi::ht_steps_of(group), topk_idx, sizing,
                                                 static_cast<cudaStream_t>(stream));
    *out_rows = handle->ht->rows();
    *out_handle = handle.release();
  });
}

EpcStatus epc_ht_dispatch(EpcHandle* handle, const EpcTensor* x, const EpcTensor* x_scales,
                          const EpcTensor* topk_weights, const EpcTensor* out_x, const EpcTensor* out_scales,
                          const EpcTensor* out_topk_idx, const EpcTensor* out_topk_weights,
                          const EpcTensor* out_expert_counts, const EpcTensor* out_num_recv, EpcFlags flags,
                          void* stream) {
  return guarded([&] {
    ht_handle_of(handle, "epc_ht_dispatch")
        .dispatch(x, x_scales, topk_weights, out_x, out_scales, out_topk_idx, out_topk_weights, out_expert_counts,
                  out_num_recv, flags, static_cast<cudaStream_t>(stream));
  });
}

EpcStatus epc_ht_combine(EpcHandle* handle, const EpcTensor* x, const EpcTensor* topk_weights, const EpcTensor* out,
                         const EpcTensor* out_topk_weights, EpcFlags flags, void* stream) {
  return guarded([&] {
    ht_handle_of(handle, "epc_ht_combine")
        .combine(x, topk_weights, out, out_topk_weights, flags, static_cast<cudaStream_t>(stream));
  });
}

}  // extern "C"
