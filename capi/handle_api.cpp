// SPDX-License-Identifier: Apache-2.0
// Handles: argument checks and marshalling only; the work is in core/ll and core/ht.
#include "capi/call_guard.hpp"
#include "capi/handles.hpp"
#include "core/step_args.hpp"
#include "core/versioned_struct.hpp"

using epc::capi::guarded;

using epc::capi::as_stream;

extern "C" {

EpcStatus epc_handle_create(EpcGroup* group, const EpcHandleConfig* config, const EpcRouting* routing, void* stream,
                            EpcHandle** out_handle) {
  return guarded([&] {
    epc::Group& g = epc::capi::group_of(group);
    if (out_handle == nullptr) epc::fail_argument("out_handle is NULL");
    const epc::HandleSetup setup = epc::resolve_handle_config(config, g.config(), g.topology().nranks);
    const EpcTensor* topk_idx = routing != nullptr ? epc::routing_tensor(routing) : nullptr;
    auto handle = std::make_unique<EpcHandle>();
    const epc::HandleName name{handle.get(), g.next_handle_id()};
    if (g.config().mode == EPC_MODE_LOW_LATENCY) {
      handle->ll =
          std::make_unique<epc::LlHandle>(g, epc::capi::ll_steps_of(group), setup, name, topk_idx, as_stream(stream));
    } else {
      handle->ht =
          std::make_unique<epc::HtHandle>(g, epc::capi::ht_steps_of(group), setup, name, topk_idx, as_stream(stream));
    }
    g.take_handle_id();  // only now: a failed creation takes no id
    handle->entry.enter(group, name);
    *out_handle = handle.release();
  });
}

EpcStatus epc_handle_update(EpcHandle* handle, const EpcRouting* routing, void* stream) {
  return guarded([&] {
    EpcHandle& h = epc::capi::live_handle(handle);
    const EpcTensor* topk_idx = epc::routing_tensor(routing);
    if (h.ll) {
      h.ll->update(topk_idx, as_stream(stream));
    } else {
      h.ht->update(topk_idx, as_stream(stream));
    }
  });
}

EpcStatus epc_handle_query(const EpcHandle* handle, EpcHandleInfo* out_info) {
  return guarded([&] {
    const EpcHandle& h = epc::capi::live_handle(handle);
    epc::check_output_struct(out_info, "EpcHandleInfo");
    epc::write_versioned(h.ll ? h.ll->info() : h.ht->info(), out_info, "EpcHandleInfo");
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

}  // extern "C"
