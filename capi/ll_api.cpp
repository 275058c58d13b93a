// Handles and the low-latency calls: argument checks and marshalling only.
#include "capi/call_guard.hpp"
#include "capi/handles.hpp"

namespace epc::capi {

epc::LlHandle& handle_of(const EpcHandle* handle) {
  if (handle == nullptr) fail_argument("handle is NULL");
  if (handle->magic != EpcHandle::kLiveMagic || !handle->handle) {
    fail_argument("handle is not a live EpcHandle (already destroyed, or another object)");
  }
  return *handle->handle;
}

}  // namespace epc::capi

using epc::capi::guarded;
using epc::capi::handle_of;

namespace {
cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }
}  // namespace

extern "C" {

EpcStatus epc_handle_create(EpcGroup* group, const EpcTensor* topk_idx, void* stream,
                            EpcHandle** out_handle) {
  return guarded([&] {
    epc::Group& g = epc::capi::group_of(group);
    if (out_handle == nullptr) epc::fail_argument("out_handle is NULL");
    auto handle = std::make_unique<EpcHandle>();
    handle->handle = std::make_unique<epc::LlHandle>(g, topk_idx, as_stream(stream));
    *out_handle = handle.release();
  });
}

EpcStatus epc_handle_update(EpcHandle* handle, const EpcTensor* topk_idx, void* stream) {
  return guarded([&] { handle_of(handle).update(topk_idx, as_stream(stream)); });
}

EpcStatus epc_handle_destroy(EpcHandle* handle) {
  return guarded([&] {
    if (handle == nullptr) return;
    handle_of(handle);
    std::unique_ptr<EpcHandle> owned(handle);
    owned->magic = 0;
  });
}

EpcStatus epc_ll_dispatch(EpcHandle* handle, const EpcTensor* x, const EpcTensor* topk_weights,
                          const EpcTensor* out_x, const EpcTensor* out_counts, EpcFlags flags,
                          void* stream) {
  return guarded([&] {
    handle_of(handle).dispatch(x, topk_weights, out_x, out_counts, flags, as_stream(stream));
  });
}

EpcStatus epc_ll_dispatch_fp8(EpcHandle* handle, const EpcTensor* x, const EpcTensor* topk_weights,
                              const EpcTensor* out_x, const EpcTensor* out_scales,
                              const EpcTensor* out_counts, EpcFlags flags, void* stream) {
  return guarded([&] {
    handle_of(handle).dispatch_fp8(x, topk_weights, out_x, out_scales, out_counts, flags,
                                   as_stream(stream));
  });
}

EpcStatus epc_ll_combine(EpcHandle* handle, const EpcTensor* expert_out, const EpcTensor* out,
                         EpcFlags flags, void* stream) {
  return guarded([&] { handle_of(handle).combine(expert_out, out, flags, as_stream(stream)); });
}

EpcStatus epc_complete(EpcHandle* handle, void* stream) {
  return guarded([&] { handle_of(handle).complete(as_stream(stream)); });
}

}  // extern "C"
