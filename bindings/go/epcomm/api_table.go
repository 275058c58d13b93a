// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <string.h>
#include <epcomm/epcomm.h>

// The library's function table, in C memory (cgo refuses a pointer to a Go variable that
// holds pointers). Filled once, under the Go side's sync.Once, and read-only afterwards.
static EpcApi epcgo_api;

static EpcStatus epcgo_load_api(void) {
  memset(&epcgo_api, 0, sizeof epcgo_api);
  epcgo_api.struct_size = (uint32_t)sizeof epcgo_api;
  epcgo_api.abi_version = EPC_ABI_VERSION;
  return epc_get_api(EPC_ABI_MAJOR, &epcgo_api);
}

static uint32_t epcgo_api_size(void) { return epcgo_api.struct_size; }
static uint32_t epcgo_api_version(void) { return epcgo_api.abi_version; }

// cgo cannot call a C function pointer: these call the table's entries. The caller has
// checked that the loaded library's table reaches the entry and that it is not NULL.
static int epcgo_has_group_async_error(void) { return epcgo_api.group_async_error != NULL; }
static EpcStatus epcgo_group_async_error(const EpcGroup* group) {
  return epcgo_api.group_async_error(group);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// The package links the library's symbols up to EPCOMM_1.2 only, so that a program built
// with it also loads against an ABI 1.2 libepcomm.so.1. Calls added later are reached
// through the library's function table (epc_get_api, EPCOMM_1.0), where an older library's
// shorter table shows what it lacks: such a call returns ErrUnsupported without calling.

var (
	apiTableOnce sync.Once
	apiTableErr  error
)

// loadFunctionTable fills the C-side copy of the loaded library's function table, once per
// process, and returns the error of that first call to every caller.
func loadFunctionTable() error {
	apiTableOnce.Do(func() {
		apiTableErr = call(func() C.EpcStatus { return C.epcgo_load_api() })
	})
	return apiTableErr
}

// functionTableHeader is the loaded table's struct_size and abi_version.
func functionTableHeader() (size, abiVersion uint32, err error) {
	if err := loadFunctionTable(); err != nil {
		return 0, 0, err
	}
	return uint32(C.epcgo_api_size()), uint32(C.epcgo_api_version()), nil
}

// tableEntry locates one entry of EpcApi, so that a call can check that the loaded
// library's table has it before calling through it.
type tableEntry struct {
	name         string
	offset, size uintptr
}

// groupAsyncErrorEntry is EpcApi.group_async_error (ABI 1.3).
var groupAsyncErrorEntry = tableEntry{"group_async_error",
	unsafe.Offsetof(C.EpcApi{}.group_async_error), unsafe.Sizeof(C.EpcApi{}.group_async_error)}

// missingFrom returns ErrUnsupported when a table that its library (of ABI abiVersion, as
// EPC_ABI_VERSION) filled up to tableSize bytes (its struct_size) does not reach the entry,
// whatever the bytes past that end hold, or when the library left the entry NULL; else nil.
func (e tableEntry) missingFrom(tableSize, abiVersion uint32, null bool) error {
	end := e.offset + e.size
	library := LibraryVersion{abiVersion / 10000, abiVersion / 100 % 100, abiVersion % 100}
	if uintptr(tableSize) < end {
		return &Error{Status: ErrUnsupported, Message: fmt.Sprintf(
			"the loaded libepcomm (ABI %v) has no %s in its function table: the table has %d bytes "+
				"and %s ends at byte %d (the library is older than these bindings, ABI %v)",
			library, e.name, tableSize, e.name, end, BindingsVersion)}
	}
	if null {
		return &Error{Status: ErrUnsupported, Message: fmt.Sprintf(
			"the loaded libepcomm (ABI %v) left %s NULL in its function table", library, e.name)}
	}
	return nil
}

// groupAsyncError calls epc_group_async_error through the function table.
func groupAsyncError(group *C.EpcGroup) error {
	size, version, err := functionTableHeader()
	if err != nil {
		return err
	}
	if err := groupAsyncErrorEntry.missingFrom(size, version, C.epcgo_has_group_async_error() == 0); err != nil {
		return err
	}
	return call(func() C.EpcStatus { return C.epcgo_group_async_error(group) })
}
