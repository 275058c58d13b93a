/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test fixture, not an example: a stand-in for an epcomm library of ABI major 3, whose
 * epc_get_api answers EPC_ERR_ABI_MISMATCH to any other major as the real one does. The
 * examples suite checks that dlopen_ll_step refuses it (meson.build beside this file).
 */
#include "epcomm/epcomm.h"

EPC_API EpcStatus epc_get_api(uint32_t abi_major, EpcApi* out_api) {
  if (abi_major != 3 || out_api == 0) return EPC_ERR_ABI_MISMATCH;
  return EPC_ERR_UNSUPPORTED; /* a real major-3 table is not needed by the test */
}
