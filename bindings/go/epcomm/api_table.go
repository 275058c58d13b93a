// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <string.h>
#include <epcomm/epcomm.h>

static EpcStatus epcgo_get_api(uint32_t major, uint32_t* out_size, uint32_t* out_version,
                               int* out_complete) {
  EpcApi api;
  memset(&api, 0, sizeof api);
  api.struct_size = (uint32_t)sizeof api;
  api.abi_version = EPC_ABI_VERSION;
  EpcStatus status = epc_get_api(major, &api);
  *out_size = api.struct_size;
  *out_version = api.abi_version;
  *out_complete = api.status_string == epc_status_string && api.dispatch == epc_dispatch &&
                  api.combine == epc_combine && api.complete == epc_complete &&
                  api.handle_query == epc_handle_query &&
                  api.group_async_error == epc_group_async_error &&
                  api.comm_init_config == epc_comm_init_config;
  return status;
}
*/
import "C"

// functionTable asks the loaded library for its function table of ABI major `major`
// (epc_get_api) and returns the table's struct_size and abi_version, and whether its
// entries are the library's own functions (a sample of them). The package calls the
// library's symbols directly; the tests use this to check the table dlopen users get.
func functionTable(major uint32) (size, abiVersion uint32, complete bool, err error) {
	var cSize, cVersion C.uint32_t
	var cComplete C.int
	err = call(func() C.EpcStatus { return C.epcgo_get_api(C.uint32_t(major), &cSize, &cVersion, &cComplete) })
	return uint32(cSize), uint32(cVersion), cComplete != 0, err
}
