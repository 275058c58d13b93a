// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import "fmt"

// LibraryVersion is an ABI version: major.minor.patch.
type LibraryVersion struct {
	Major, Minor, Patch uint32
}

// String returns "major.minor.patch".
func (v LibraryVersion) String() string {
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// older says whether v comes before other.
func (v LibraryVersion) older(other LibraryVersion) bool {
	if v.Major != other.Major {
		return v.Major < other.Major
	}
	if v.Minor != other.Minor {
		return v.Minor < other.Minor
	}
	return v.Patch < other.Patch
}

// BindingsVersion is the ABI version of the header these bindings were compiled against.
var BindingsVersion = LibraryVersion{ABIMajor, ABIMinor, ABIPatch}

// Version returns the ABI version of the loaded library (epc_get_version). It works with
// any library major, so it is the call to diagnose a mismatch with. Local, thread-safe.
func Version() (LibraryVersion, error) {
	var major, minor, patch C.uint32_t
	err := callOnLockedThread(func() C.EpcStatus {
		return C.epc_get_version(&major, &minor, &patch)
	})
	if err != nil {
		return LibraryVersion{}, err
	}
	return LibraryVersion{uint32(major), uint32(minor), uint32(patch)}, nil
}
