// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestVersionMatchesTheHeader(t *testing.T) {
	got, err := Version()
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	if got != BindingsVersion {
		t.Errorf("library ABI %v, bindings generated from header %v", got, BindingsVersion)
	}
	if want := fmt.Sprintf("%d.%d.%d", ABIMajor, ABIMinor, ABIPatch); got.String() != want {
		t.Errorf("String() = %q, want %q", got.String(), want)
	}
}

func TestABIMajorCheck(t *testing.T) {
	if err := checkABIMajor(LibraryVersion{ABIMajor, ABIMinor + 7, 3}); err != nil {
		t.Errorf("same major, newer minor rejected: %v", err)
	}
	err := checkABIMajor(LibraryVersion{ABIMajor + 1, 0, 0})
	if !errors.Is(err, ErrABIMismatch) {
		t.Fatalf("major %d accepted or wrong status: %v", ABIMajor+1, err)
	}
	if !strings.Contains(err.Error(), "ABI major") {
		t.Errorf("message does not explain the mismatch: %v", err)
	}
	if err := checkLibraryOnce(); err != nil {
		t.Errorf("the loaded library fails the first-use check: %v", err)
	}
}
