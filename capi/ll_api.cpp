// SPDX-License-Identifier: Apache-2.0
// Handles and the low-latency calls: argument checks and marshalling only.
#include "capi/call_guard.hpp"
#include "capi/handles.hpp"

using epc::capi::guarded;
using epc::capi::ll_handle_of;

namespace {
cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }
}  // namespace

extern "C" {

EpcStatus epc_handle_create(EpcGroup* group, const EpcTensor* topk_idx, void* stream, EpcHandle** out_handle) {
  return guarded([&] {
    epc::Group& g = epc::capi::group_of(group);
    if (out_handle == nullptr) epc::fail_argument("out_handle is NULL");
    if (g.config().mode != EPC_MODE_LOW_LATENCY) {
      epc::fail_argument(
          "epc_handle_create: the group is in high-throughput mode; create its "
          "handles with epc_ht_handle_create");
    }
    auto handle = std::make_unique<EpcHandle>();
    handle->ll = std::make_unique<epc::LlHandle>(g, epc::capi::ll_steps_of(group), topk_idx, as_stream(stream));
    *out_handle = handle.release();
  });
}

EpcStatus epc_handle_update(EpcHandle* handle, const EpcTensor* topk_idx, void* stream) {
  return guarded([&] {
    EpcHandle& h = epc::capi::live_handle(handle);
    if (h.ll) {
      h.ll->update(topk_idx, as_stream(stream));
    } else {
      h.ht->update(topk_idx, as_stream(stream));
    }
  });
}

EpcStatus epc_handle_destroy(EpcHandle* handle) {
  return guarded([&] {
    if (handle == nullptr) return;
    epc::capi::live_handle(handle);
    std::unique_ptr<EpcHandle> owned(handle);
    owned->magic = 0;
  });
}

EpcStatus epc_ll_dispatch(EpcHandle* handle, const EpcTensor* x, const EpcTensor* topk_weights, const EpcTensor* out_x,
                          const EpcTensor* out_counts, EpcFlags flags, void* stream) {
  return guarded([&] {
    ll_handle_of(handle, "epc_ll_dispatch").dispatch(x, topk_weights, out_x, out_counts, flags, as_stream(stream));
  });
}

EpcStatus epc_ll_dispatch_fp8(EpcHandle* handle, const EpcTensor* x, const EpcTensor* topk_weights,
                              const EpcTensor* out_x, const EpcTensor* out_scales, const EpcTensor* out_counts,
                              EpcFlags flags, void* stream) {
  return guarded([&] {
    ll_handle_of(handle, "epc_ll_dispatch_fp8")
        .dispatch_fp8(x, topk_weights, out_x, out_scales, out_counts, flags, as_stream(stream));
  });
}

EpcStatus epc_ll_combine(EpcHandle* handle, const EpcTensor* expert_out, const EpcTensor* out, EpcFlags flags,
                         void* stream) {
  return guarded([&] { ll_handle_of(handle, "epc_ll_combine").combine(expert_out, out, flags, as_stream(stream)); });
}

EpcStatus epc_complete(EpcHandle* handle, void* stream) {
  return guarded([&] {
    ll_handle_of(handle, "epc_complete (high-throughput calls have no send-only split)").complete(as_stream(stream));
  });
}

}  // extern "C"
