// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNewGroupWithNilCommIsInvalid(t *testing.T) {
	cfg := GroupConfig{NumExperts: 64, Hidden: 2048}
	for name, comm := range map[string]*Comm{"nil *Comm": nil, "AdoptComm(nil)": AdoptComm(nil)} {
		group, err := NewGroup(comm, cfg)
		if group != nil || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v, %v; want ErrInvalidArgument", name, group, err)
			continue
		}
		if !strings.Contains(err.Error(), "comm is NULL") {
			t.Errorf("%s: message %q does not say comm is NULL", name, err)
		}
	}
}

func TestNewGroupValidatesTheConfigFirst(t *testing.T) {
	_, err := NewGroup(nil, GroupConfig{NumExperts: 64, Hidden: 12})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "hidden") {
		t.Errorf("hidden 12: %v", err)
	}
}

func TestInitCommChecksTheRankBeforeAnyGPUWork(t *testing.T) {
	inits := map[string]func() (*Comm, error){
		"InitComm":        func() (*Comm, error) { return InitComm(UniqueID{}, 2, 5, 0) },
		"InitCommTimeout": func() (*Comm, error) { return InitCommTimeout(UniqueID{}, 2, 5, 0, time.Second) },
	}
	for name, init := range inits {
		comm, err := init()
		if comm != nil {
			t.Errorf("%s: got a Comm", name)
		}
		wantError(t, name, err, ErrInvalidArgument, "rank is 5")
	}
	_, err := InitCommTimeout(UniqueID{}, 1, 0, 0, -time.Second)
	wantError(t, "a negative timeout", err, ErrInvalidArgument, "timeout is -1s")
}

func TestAdoptedCommCloseIsLocalAndIdempotent(t *testing.T) {
	comm := AdoptComm(nil)
	if err := comm.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := comm.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := NewGroup(comm, GroupConfig{NumExperts: 64, Hidden: 2048}); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "closed") {
		t.Errorf("NewGroup on a closed Comm: %v", err)
	}
	var none *Comm
	if none.Close() != nil || none.Handle() != nil {
		t.Error("a nil *Comm should close as a no-op and have no handle")
	}
}

func TestCommCloseRefusesWhileAGroupIsOpen(t *testing.T) {
	comm := AdoptComm(nil)
	comm.openGroups = 1 // as NewGroup counts a group built on it
	err := comm.Close()
	if !errors.Is(err, ErrInvalidUsage) || !strings.Contains(err.Error(), "1 group(s)") {
		t.Errorf("Close with an open group: %v; want ErrInvalidUsage, as for a Group with open handles", err)
	}
	if comm.closed {
		t.Error("the refused Close forgot the communicator")
	}
	comm.openGroups = 0
	if err := comm.Close(); err != nil {
		t.Errorf("Close once the group is closed: %v", err)
	}
}

func TestClosedGroupRejectsCalls(t *testing.T) {
	group := &Group{comm: AdoptComm(nil)} // what Close leaves behind
	if err := group.Close(); err != nil {
		t.Errorf("Close of a closed group: %v", err)
	}
	if _, err := group.Info(); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Info: %v", err)
	}
	if err := group.Barrier(0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Barrier: %v", err)
	}
}

func TestUniqueIDTextRoundTrip(t *testing.T) {
	var id UniqueID
	for i := range id {
		id[i] = byte(i * 7)
	}
	back, err := ParseUniqueID(id.String())
	if err != nil || back != id {
		t.Errorf("round trip: %v, equal %v", err, back == id)
	}
	if _, err := ParseUniqueID("abc"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("short text: %v", err)
	}
}
