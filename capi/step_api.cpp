// SPDX-License-Identifier: Apache-2.0
// Steps: dispatch, combine and complete on a handle of either mode. Argument checks and
// marshalling only; the work is in core/ll and core/ht.
#include "capi/call_guard.hpp"
#include "capi/handles.hpp"
#include "core/step_args.hpp"

using epc::capi::guarded;

using epc::capi::as_stream;

extern "C" {

EpcStatus epc_dispatch(EpcHandle* handle, const EpcDispatchArgs* args, void* stream) {
  return guarded([&] {
    EpcHandle& h = epc::capi::live_handle(handle);
    const EpcDispatchArgs a = epc::read_dispatch_args(args);
    if (h.ll) {
      h.ll->dispatch(a, as_stream(stream));
    } else {
      h.ht->dispatch(a, as_stream(stream));
    }
  });
}

EpcStatus epc_combine(EpcHandle* handle, const EpcCombineArgs* args, void* stream) {
  return guarded([&] {
    EpcHandle& h = epc::capi::live_handle(handle);
    const EpcCombineArgs a = epc::read_combine_args(args);
    if (h.ll) {
      h.ll->combine(a, as_stream(stream));
    } else {
      h.ht->combine(a, as_stream(stream));
    }
  });
}

EpcStatus epc_complete(EpcHandle* handle, uint32_t flags, void* stream) {
  return guarded([&] {
    EpcHandle& h = epc::capi::live_handle(handle);
    if (flags != 0) epc::fail_argument(epc::format("epc_complete: flags is 0x%x; no flags are defined, pass 0", flags));
    if (h.ll) {
      h.ll->complete(as_stream(stream));
    } else {
      h.ht->complete(as_stream(stream));
    }
  });
}

}  // extern "C"
