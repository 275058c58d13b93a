// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"
)

// call runs one C call of the library, after checking once that the loaded library speaks
// this package's ABI major version.
func call(fn func() C.EpcStatus) error {
	if err := checkLibraryOnce(); err != nil {
		return err
	}
	return callOnLockedThread(fn)
}

// callOnLockedThread runs fn and, when it fails, reads the library's message for it. The
// message lives in a C thread-local, so the goroutine stays on one OS thread for both.
// LockOSThread nests: a caller that holds its own lock keeps it.
func callOnLockedThread(fn func() C.EpcStatus) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	status := Status(fn())
	if status == OK {
		return nil
	}
	return &Error{Status: status, Message: lastErrorOnThisThread()}
}

// lastErrorOnThisThread copies the calling thread's epc_last_error message. The caller must
// hold runtime.LockOSThread since the failed call.
func lastErrorOnThisThread() string {
	var length C.size_t
	if C.epc_last_error(nil, 0, &length) != C.EPC_OK || length == 0 {
		return ""
	}
	buf := make([]byte, int(length)+1)
	if C.epc_last_error((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &length) != C.EPC_OK {
		return ""
	}
	if int(length) > len(buf)-1 {
		length = C.size_t(len(buf) - 1)
	}
	return string(buf[:length])
}

var (
	libraryCheck    sync.Once
	libraryCheckErr error
	loadedVersion   LibraryVersion // the loaded library's, once libraryCheck passed
)

// checkLibraryOnce compares the loaded library's ABI major with EPC_ABI_MAJOR the first
// time any call needs the library, and keeps its version in loadedVersion.
func checkLibraryOnce() error {
	libraryCheck.Do(func() {
		version, err := Version()
		if err == nil {
			err = checkABIMajor(version)
		}
		loadedVersion, libraryCheckErr = version, err
	})
	return libraryCheckErr
}

// checkABIMajor says whether a library of `library`'s version can serve these bindings.
func checkABIMajor(library LibraryVersion) error {
	if library.Major == ABIMajor {
		return nil
	}
	return &Error{Status: ErrABIMismatch, Message: fmt.Sprintf(
		"the loaded libepcomm has ABI %v but these Go bindings were built for ABI major %d "+
			"(header %v): use libepcomm.so.%d", library, ABIMajor, BindingsVersion, ABIMajor)}
}

// argumentError is a Go-side argument check's failure, shaped like the library's own.
func argumentError(format string, args ...interface{}) error {
	return &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

// usageError is a Go-side refusal of a call out of order, with the status the library gives
// for one (ErrInvalidUsage).
func usageError(format string, args ...interface{}) error {
	return &Error{Status: ErrInvalidUsage, Message: fmt.Sprintf(format, args...)}
}

// int32Arg converts a Go int argument for a C int32_t parameter.
func int32Arg(name string, value int) (C.int32_t, error) {
	if value < math.MinInt32 || value > math.MaxInt32 {
		return 0, argumentError("%s is %d, outside the int32 range", name, value)
	}
	return C.int32_t(value), nil
}
