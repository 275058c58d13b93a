// SPDX-License-Identifier: Apache-2.0
// The fuzz build compiles only the GPU-free part of the C ABI (capi/last_error.cpp,
// plan_api.cpp, api_table.cpp) with libFuzzer; epc_get_api's function table still names every
// exported function, so the calls that need CUDA and NCCL are defined here as refusals, each
// naming itself ("... is not part of the fuzz build"). fuzz_c_api.cpp calls the group and
// handle ones only on objects that are not live, where the real library refuses them too;
// the real ones are in the rest of capi/.
#include "capi/call_guard.hpp"
#include "epcomm/epcomm.h"

namespace {
EpcStatus absent(const char* call) {
  return epc::capi::guarded(
      [&] { epc::fail(EPC_ERR_UNSUPPORTED, epc::format("%s is not part of the fuzz build", call)); });
}
}  // namespace

extern "C" {
EpcStatus epc_unique_id_create(EpcUniqueId*) { return absent("epc_unique_id_create"); }
EpcStatus epc_comm_init(const EpcUniqueId*, int32_t, int32_t, int32_t, void**) { return absent("epc_comm_init"); }
EpcStatus epc_comm_init_config(const EpcUniqueId*, int32_t, int32_t, int32_t, const EpcCommConfig*, void**) {
  return absent("epc_comm_init_config");
}
EpcStatus epc_comm_destroy(void*) { return absent("epc_comm_destroy"); }
EpcStatus epc_group_create(void*, const EpcGroupConfig*, EpcGroup**) { return absent("epc_group_create"); }
EpcStatus epc_group_destroy(EpcGroup*) { return absent("epc_group_destroy"); }
EpcStatus epc_group_query(const EpcGroup*, EpcGroupInfo*) { return absent("epc_group_query"); }
EpcStatus epc_group_barrier(EpcGroup*, void*) { return absent("epc_group_barrier"); }
EpcStatus epc_group_async_error(const EpcGroup*) { return absent("epc_group_async_error"); }
EpcStatus epc_handle_create(EpcGroup*, const EpcHandleConfig*, const EpcRouting*, void*, EpcHandle**) {
  return absent("epc_handle_create");
}
EpcStatus epc_handle_update(EpcHandle*, const EpcRouting*, void*) { return absent("epc_handle_update"); }
EpcStatus epc_handle_query(const EpcHandle*, EpcHandleInfo*) { return absent("epc_handle_query"); }
EpcStatus epc_handle_destroy(EpcHandle*) { return absent("epc_handle_destroy"); }
EpcStatus epc_dispatch(EpcHandle*, const EpcDispatchArgs*, void*) { return absent("epc_dispatch"); }
EpcStatus epc_combine(EpcHandle*, const EpcCombineArgs*, void*) { return absent("epc_combine"); }
EpcStatus epc_complete(EpcHandle*, uint32_t, void*) { return absent("epc_complete"); }
}  // extern "C"
