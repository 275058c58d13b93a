// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import "encoding/hex"

// UniqueID names one communicator to be created (an ncclUniqueId). One process creates it
// and every rank receives its bytes; String and ParseUniqueID carry it as hex text (an
// environment variable, a file, a command-line flag).
type UniqueID [UniqueIDBytes]byte

// NewUniqueID creates a unique id (epc_unique_id_create). Local, blocking, thread-safe.
func NewUniqueID() (UniqueID, error) {
	var id C.EpcUniqueId
	if err := call(func() C.EpcStatus { return C.epc_unique_id_create(&id) }); err != nil {
		return UniqueID{}, err
	}
	var out UniqueID
	for i := range out {
		out[i] = byte(id.bytes[i])
	}
	return out, nil
}

// String returns the id as lower-case hex, the form ParseUniqueID reads.
func (id UniqueID) String() string { return hex.EncodeToString(id[:]) }

// ParseUniqueID reads the hex text UniqueID.String wrote.
func ParseUniqueID(text string) (UniqueID, error) {
	var id UniqueID
	raw, err := hex.DecodeString(text)
	if err != nil || len(raw) != len(id) {
		return id, argumentError("a unique id is %d hex digits (%d bytes); got %d characters",
			2*len(id), len(id), len(text))
	}
	copy(id[:], raw)
	return id, nil
}

func (id *UniqueID) toC() C.EpcUniqueId {
	var out C.EpcUniqueId
	for i, b := range id {
		out.bytes[i] = C.uint8_t(b)
	}
	return out
}
