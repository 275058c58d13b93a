// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestStatusStrings(t *testing.T) {
	if got := OK.Error(); got != "success" {
		t.Errorf("OK: %q", got)
	}
	if got := ErrTimeout.Error(); got != "timeout: a peer did not arrive" {
		t.Errorf("ErrTimeout: %q", got)
	}
	for s := OK; s <= ErrInternal; s++ {
		if text := s.Error(); text == "" || strings.Contains(text, unknownStatusText) {
			t.Errorf("status %d has text %q", int32(s), text)
		}
	}
}

func TestUnknownStatusKeepsItsCode(t *testing.T) {
	for _, code := range []int32{-1, 12345} {
		s := Status(code)
		if int32(s) != code {
			t.Errorf("Status(%d) became %d", code, int32(s))
		}
		if want := "unknown status " + strconv.Itoa(int(code)); s.Error() != want {
			t.Errorf("Status(%d).Error() = %q, want %q", code, s.Error(), want)
		}
		var err error = &Error{Status: s, Message: "from a newer library"}
		var asStatus Status
		if !errors.As(err, &asStatus) || asStatus != s {
			t.Errorf("errors.As gave %d, want %d", int32(asStatus), code)
		}
		if !errors.Is(err, Status(code)) || errors.Is(err, ErrInternal) {
			t.Errorf("errors.Is does not compare the exact code %d", code)
		}
	}
}

func TestErrorFormatsStatusAndMessage(t *testing.T) {
	err := &Error{Status: ErrInvalidArgument, Message: "hidden is 0"}
	if got, want := err.Error(), "epcomm: "+ErrInvalidArgument.Error()+": hidden is 0"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrUnsupported) {
		t.Error("errors.Is does not follow the Status")
	}
}

func TestDtypeStringNamesKnownValues(t *testing.T) {
	if DtypeBF16.String() != "DtypeBF16" || Dtype(99).String() != "Dtype(99)" {
		t.Errorf("Dtype strings: %v %v", DtypeBF16, Dtype(99))
	}
}
