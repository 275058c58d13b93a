// SPDX-License-Identifier: Apache-2.0
// Turning an EpcHandle* from a caller into a live handle, or a clear error.
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

}  // namespace epc::capi
