// SPDX-License-Identifier: Apache-2.0
// Turning an EpcHandle* from a caller into the handle of the right mode, or a clear error.
#include "capi/handles.hpp"

#include "core/error.hpp"

namespace epc::capi {

EpcHandle& live_handle(const EpcHandle* handle) {
  if (handle == nullptr) fail_argument("handle is NULL");
  if (handle->magic != EpcHandle::kLiveMagic || (!handle->ll && !handle->ht)) {
    fail_argument("handle is not a live EpcHandle (already destroyed, or another object)");
  }
  return *const_cast<EpcHandle*>(handle);
}

epc::LlHandle& ll_handle_of(const EpcHandle* handle, const char* call) {
  EpcHandle& h = live_handle(handle);
  if (!h.ll) {
    fail_argument(
        format("%s: the handle belongs to a high-throughput group; use the epc_ht_* "
               "calls with it",
               call));
  }
  return *h.ll;
}

epc::HtHandle& ht_handle_of(const EpcHandle* handle, const char* call) {
  EpcHandle& h = live_handle(handle);
  if (!h.ht) {
    fail_argument(
        format("%s: the handle belongs to a low-latency group; use the epc_ll_* "
               "calls with it",
               call));
  }
  return *h.ht;
}

}  // namespace epc::capi
