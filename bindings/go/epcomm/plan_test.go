// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// The planner's hand-worked case (tests/unit/test_planner.cpp): 4 ranks, 256 experts,
// hidden 7168, LL defaults (128 tokens, top-8).
func TestPlanQueryLowLatencyFourRanks(t *testing.T) {
	plan, err := PlanQuery(GroupConfig{NumExperts: 256, Hidden: 7168}, 4, 4, 1)
	if err != nil {
		t.Fatalf("PlanQuery: %v", err)
	}
	const wantWindow = 29478912 // 7197 pages of 4096 bytes
	if plan.SymmetricBytes != wantWindow {
		t.Errorf("SymmetricBytes = %d, want %d", plan.SymmetricBytes, wantWindow)
	}
	if len(plan.Regions) != 9 {
		t.Fatalf("%d regions, want 9: %+v", len(plan.Regions), plan.Regions)
	}
	if got := plan.Regions[1].Name; got != "dispatch_recv[0]" {
		t.Errorf("region 1 is %q, want dispatch_recv[0]", got)
	}
	if r := plan.Regions[1]; r.Kind != RegionDispatchRecv || r.Slot != 0 || r.Offset != 256 || r.Size != 7398400 {
		t.Errorf("region 1 = %+v", r)
	}
	if r := plan.Regions[0]; r.Name != "control" || r.Slot != SlotNone {
		t.Errorf("region 0 = %+v", r)
	}
	if plan.Mode != ModeLowLatency || plan.NumSlots != 2 || plan.Dtype != DtypeBF16 || plan.NumSMs != 132 {
		t.Errorf("plan header = %+v", plan)
	}
	last := plan.Regions[len(plan.Regions)-1]
	if plan.SymmetricBytes < last.Offset+last.Size {
		t.Errorf("window %d bytes ends before its last region %+v", plan.SymmetricBytes, last)
	}
}

func TestPlanQueryZeroHiddenIsInvalid(t *testing.T) {
	_, err := PlanQuery(GroupConfig{NumExperts: 256, Hidden: 0}, 4, 4, 1)
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("hidden 0: got %v, want ErrInvalidArgument", err)
	}
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Message, "hidden") {
		t.Errorf("the library's message should name hidden: %#v", err)
	}
}

func TestPlanQueryReportsTheLibrarysStatus(t *testing.T) {
	_, err := PlanQuery(GroupConfig{NumExperts: 64, Hidden: 2048, Dtype: DtypeInt64}, 4, 4, 1)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "dtype") {
		t.Errorf("int64 payload: %v", err)
	}
}

func TestPlanQueryTimeoutIsRoundedUpToMilliseconds(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want uint32
	}{{0, 0}, {time.Nanosecond, 1}, {time.Millisecond, 1}, {1500 * time.Microsecond, 2}, {3 * time.Second, 3000}} {
		if got, err := timeoutMilliseconds(c.in); err != nil || got != c.want {
			t.Errorf("timeoutMilliseconds(%v) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	if _, err := PlanQuery(GroupConfig{NumExperts: 64, Hidden: 2048, Timeout: -time.Second}, 4, 4, 1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("negative timeout: %v", err)
	}
}

func TestPlanQueryRejectsRankCountsOutsideInt32(t *testing.T) {
	if math.MaxInt == math.MaxInt32 {
		t.Skip("int is 32 bits here")
	}
	_, err := PlanQuery(GroupConfig{NumExperts: 64, Hidden: 2048}, math.MaxInt32+1, 4, 1)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "nranks") {
		t.Errorf("nranks 2^31: %v", err)
	}
}

// Virtual nodes of 2 on one NVLink team of 4 (ABI 1.3): the library reads the field and
// gives the two ranks of the other virtual node a staging mirror, the window's last region.
func TestPlanQueryVirtualNodesAddNetworkStaging(t *testing.T) {
	cfg := GroupConfig{NumExperts: 256, Hidden: 7168}
	wholeTeam, err := PlanQuery(cfg, 4, 4, 1)
	if err != nil {
		t.Fatalf("PlanQuery: %v", err)
	}
	cfg.VirtualNodeSize = 2
	plan, err := PlanQuery(cfg, 4, 4, 1)
	if err != nil {
		t.Fatalf("PlanQuery with VirtualNodeSize 2: %v", err)
	}
	if len(plan.Regions) != len(wholeTeam.Regions)+1 {
		t.Fatalf("%d regions, want %d: %+v", len(plan.Regions), len(wholeTeam.Regions)+1, plan.Regions)
	}
	last := plan.Regions[len(plan.Regions)-1]
	if last.Kind != RegionNetStaging || last.Name != "net_staging" || last.Slot != SlotNone {
		t.Errorf("last region = %+v (%v), want net_staging of kind RegionNetStaging", last, last.Kind)
	}
	if last.Offset+last.Size > plan.SymmetricBytes || plan.SymmetricBytes <= wholeTeam.SymmetricBytes {
		t.Errorf("window %d bytes (without virtual nodes %d), staging %+v", plan.SymmetricBytes, wholeTeam.SymmetricBytes, last)
	}
	for _, r := range wholeTeam.Regions {
		if r.Kind == RegionNetStaging {
			t.Errorf("a single node has a staging region: %+v", r)
		}
	}
}

func TestPlanQueryVirtualNodeSizeMustDivideTheTeam(t *testing.T) {
	_, err := PlanQuery(GroupConfig{NumExperts: 256, Hidden: 7168, VirtualNodeSize: 3}, 4, 4, 1)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "virtual_node_size") {
		t.Errorf("VirtualNodeSize 3 on a team of 4: %v, want ErrInvalidArgument naming virtual_node_size", err)
	}
}

// A library older than ABI 1.3 reads the field as reserved0 (must be 0): the bindings
// refuse a non-zero VirtualNodeSize before calling it.
func TestVirtualNodeSizeNeedsABI13(t *testing.T) {
	cfg := GroupConfig{NumExperts: 64, Hidden: 2048, VirtualNodeSize: 2}
	err := cfg.supportedBy(LibraryVersion{1, 2, 0})
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("ABI 1.2.0: %v, want ErrUnsupported", err)
	}
	for _, part := range []string{"VirtualNodeSize (2)", "ABI 1.3.0 or newer", "implements ABI 1.2.0"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("message lacks %q: %v", part, err)
		}
	}
	for _, v := range []LibraryVersion{{1, 3, 0}, {1, 4, 2}, BindingsVersion} {
		if err := cfg.supportedBy(v); err != nil {
			t.Errorf("ABI %v: %v", v, err)
		}
	}
	cfg.VirtualNodeSize = 0
	if err := cfg.supportedBy(LibraryVersion{1, 0, 0}); err != nil {
		t.Errorf("VirtualNodeSize 0 on ABI 1.0.0: %v", err)
	}
	if c, err := (&GroupConfig{VirtualNodeSize: 4}).toC(); err != nil || c.virtual_node_size != 4 {
		t.Errorf("toC: virtual_node_size %d, %v", c.virtual_node_size, err)
	}
}
