// SPDX-License-Identifier: Apache-2.0
// epc_get_api: the function table for callers that dlopen the library and resolve a single
// symbol. Append-only; the caller's struct_size says how much of it they know.
#include <cstring>

#include "capi/call_guard.hpp"
#include "core/versioned_struct.hpp"

extern "C" EpcStatus epc_get_api(uint32_t abi_major, EpcApi* out_api) {
  return epc::capi::guarded([&] {
    if (abi_major != EPC_ABI_MAJOR) {
      epc::fail(EPC_ERR_ABI_MISMATCH,
                epc::format("the caller wants ABI major %u; this library implements %d", abi_major, EPC_ABI_MAJOR));
    }
    if (out_api == nullptr) epc::fail_argument("out_api is NULL");
    if (out_api->struct_size < epc::kMinStructSize) {
      epc::fail(EPC_ERR_ABI_MISMATCH,
                epc::format("EpcApi.struct_size is %u; set it to sizeof(EpcApi)", out_api->struct_size));
    }
    // As every versioned struct's (core/versioned_struct.cpp): a size between two multiples
    // of 8 ends inside a pointer, half of which would be written.
    if (out_api->struct_size % epc::kStructSizeGranule != 0) {
      epc::fail(EPC_ERR_ABI_MISMATCH,
                epc::format("EpcApi.struct_size is %u, which ends inside a field: every layout's size is a "
                            "multiple of %u; set it to sizeof(EpcApi)",
                            out_api->struct_size, epc::kStructSizeGranule));
    }
    EpcApi api;
    std::memset(&api, 0, sizeof api);
    api.struct_size = sizeof api;
    api.abi_version = EPC_ABI_VERSION;
    api.status_string = &epc_status_string;
    api.last_error = &epc_last_error;
    api.get_version = &epc_get_version;
    api.unique_id_create = &epc_unique_id_create;
    api.comm_init = &epc_comm_init;
    api.comm_destroy = &epc_comm_destroy;
    api.plan_query = &epc_plan_query;
    api.group_create = &epc_group_create;
    api.group_destroy = &epc_group_destroy;
    api.group_query = &epc_group_query;
    api.group_barrier = &epc_group_barrier;
    api.group_async_error = &epc_group_async_error;
    api.handle_create = &epc_handle_create;
    api.handle_update = &epc_handle_update;
    api.handle_query = &epc_handle_query;
    api.handle_destroy = &epc_handle_destroy;
    api.dispatch = &epc_dispatch;
    api.combine = &epc_combine;
    api.complete = &epc_complete;
    api.comm_init_config = &epc_comm_init_config;
    // The caller learns our size from struct_size, even when it knows a longer table.
    uint32_t caller_size = out_api->struct_size;
    size_t n = caller_size < sizeof api ? caller_size : sizeof api;
    std::memcpy(out_api, &api, n);
    if (caller_size > sizeof api) {
      std::memset(reinterpret_cast<unsigned char*>(out_api) + sizeof api, 0, caller_size - sizeof api);
    }
    out_api->struct_size = static_cast<uint32_t>(sizeof api);
  });
}
