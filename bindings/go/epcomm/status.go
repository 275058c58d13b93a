// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import "strconv"

// unknownStatusText is what epc_status_string returns for codes the library does not know.
const unknownStatusText = "unknown status"

// Error returns the library's static English text for s (epc_status_string), with the
// number added for a code the library does not know. A Status is an error so that
// errors.Is(err, ErrTimeout) works on every error this package returns; OK is never
// returned as an error. Local, thread-safe.
func (s Status) Error() string {
	text := C.GoString(C.epc_status_string(C.EpcStatus(s)))
	if text == unknownStatusText {
		return text + " " + strconv.FormatInt(int64(s), 10)
	}
	return text
}

// String is Error: the status's text.
func (s Status) String() string { return s.Error() }

// Error is a failed call: its Status and the detail message the library recorded for it
// (epc_last_error, read on the thread that made the call), or the binding's own message
// for arguments it rejects before calling C. errors.Is(err, s) is true for its Status s.
type Error struct {
	Status  Status
	Message string
}

// Error returns "<status text>: <message>".
func (e *Error) Error() string {
	if e.Message == "" {
		return "epcomm: " + e.Status.Error()
	}
	return "epcomm: " + e.Status.Error() + ": " + e.Message
}

// Unwrap returns the Status, which makes errors.Is and errors.As see it.
func (e *Error) Unwrap() error { return e.Status }
