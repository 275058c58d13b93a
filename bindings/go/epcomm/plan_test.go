// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// The planner's hand-worked case (tests/unit/test_planner.cpp): 4 ranks, 256 experts,
// hidden 7168, LL defaults (128 tokens, top-8).
func TestPlanQueryLowLatencyFourRanks(t *testing.T) {
	plan, err := PlanQuery(GroupConfig{NumExperts: 256, Hidden: 7168}, 4, 4, 1)
	if err != nil {
		t.Fatalf("PlanQuery: %v", err)
	}
	const wantWindow = 35233792 // 8602 pages of 4096 bytes
	if plan.SymmetricBytes != wantWindow {
		t.Errorf("SymmetricBytes = %d, want %d", plan.SymmetricBytes, wantWindow)
	}
	if len(plan.Regions) != 9 {
		t.Fatalf("%d regions, want 9: %+v", len(plan.Regions), plan.Regions)
	}
	if got := plan.Regions[1].Name; got != "dispatch_recv[0]" {
		t.Errorf("region 1 is %q, want dispatch_recv[0]", got)
	}
	if r := plan.Regions[1]; r.Kind != RegionDispatchRecv || r.Slot != 0 || r.Offset != 256 || r.Size != 8440832 {
		t.Errorf("region 1 = %+v", r)
	}
	if r := plan.Regions[0]; r.Name != "control" || r.Slot != SlotNone {
		t.Errorf("region 0 = %+v", r)
	}
	if plan.Mode != ModeLowLatency || plan.NumSlots != 2 || plan.MaxTokenBytes != 2*7168 ||
		plan.RecvCapacity != 4*128 || plan.MaxPendingSteps != 2 || plan.HandleBytes == 0 || plan.NumSMs != 132 {
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

// The 2.0 group fields, after defaults and by the status rule (values this library does not
// serve yet: ErrUnsupported; values outside the ABI: ErrInvalidArgument).
func TestPlanQueryGroupFields(t *testing.T) {
	base := GroupConfig{NumExperts: 64, Hidden: 2048}
	fp8 := base
	fp8.MaxTokenBytes = 2048 + 2048/32 + 5 // rounded down to an fp8-only window
	plan, err := PlanQuery(fp8, 4, 4, 1)
	if err != nil || plan.MaxTokenBytes != 2048+2048/32 {
		t.Errorf("fp8 window: max_token_bytes %d, %v", plan.MaxTokenBytes, err)
	}
	for _, c := range []struct {
		name   string
		change func(*GroupConfig)
		status Status
		words  string
	}{
		{"a window below fp8 rows", func(g *GroupConfig) { g.MaxTokenBytes = 2048 }, ErrInvalidArgument, "max_token_bytes"},
		{"recv_capacity below R*T", func(g *GroupConfig) { g.RecvCapacity = 4*128 - 1 }, ErrUnsupported, "recv_capacity"},
		{"recv_capacity above R*T", func(g *GroupConfig) { g.RecvCapacity = 4*128 + 1 }, ErrInvalidArgument, "recv_capacity"},
		{"an unknown overflow", func(g *GroupConfig) { g.Overflow = 7 }, ErrInvalidArgument, "overflow"},
		{"four pending steps", func(g *GroupConfig) { g.MaxPendingSteps = 4 }, ErrUnsupported, "max_pending_steps"},
		{"an unknown group flag", func(g *GroupConfig) { g.Flags = 0x80 }, ErrInvalidArgument, "flags"},
	} {
		cfg := base
		c.change(&cfg)
		_, err := PlanQuery(cfg, 4, 4, 1)
		if !errors.Is(err, c.status) || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%s: %v, want %v naming %s", c.name, err, c.status, c.words)
		}
	}
	for _, cfg := range []GroupConfig{
		{NumExperts: 64, Hidden: 2048, RecvCapacity: 4 * 128, Overflow: OverflowDrop, MaxPendingSteps: 1},
		{NumExperts: 64, Hidden: 2048, Mode: ModeHighThroughput, MaxTokensPerRank: 256, RecvCapacity: 4 * 256},
	} {
		if plan, err := PlanQuery(cfg, 4, 4, 1); err != nil || plan.RecvCapacity != cfg.RecvCapacity {
			t.Errorf("%+v: recv_capacity %d, %v", cfg, plan.RecvCapacity, err)
		}
	}
}

func TestPlanQueryTimeoutIsRoundedUpToMilliseconds(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want uint32
	}{{0, 0}, {time.Nanosecond, 1}, {time.Millisecond, 1}, {1500 * time.Microsecond, 2}, {3 * time.Second, 3000}} {
		if got, err := timeoutMilliseconds("Timeout", c.in); err != nil || got != c.want {
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
// stages what each rank sends the two ranks of the other virtual node in the window's last region.
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
	// Both modes serve GroupCombinePerEntry across virtual nodes (2.1): each rank stages the
	// entries' rows it sends the other node, so the staging region grows.
	for _, mode := range []Mode{ModeLowLatency, ModeHighThroughput} {
		cfg := GroupConfig{NumExperts: 256, Hidden: 7168, Mode: mode, VirtualNodeSize: 2}
		partials, err := PlanQuery(cfg, 4, 4, 1)
		if err != nil {
			t.Fatalf("mode %v, PlanQuery across virtual nodes: %v", mode, err)
		}
		cfg.Flags = GroupCombinePerEntry
		perEntry, err := PlanQuery(cfg, 4, 4, 1)
		if err != nil {
			t.Fatalf("mode %v, PlanQuery with GroupCombinePerEntry across virtual nodes: %v", mode, err)
		}
		without, staged := partials.Regions[len(partials.Regions)-1], perEntry.Regions[len(perEntry.Regions)-1]
		if staged.Kind != RegionNetStaging || without.Kind != RegionNetStaging || staged.Size <= without.Size {
			t.Errorf("mode %v: per-entry staging %+v, without the flag %+v", mode, staged, without)
		}
	}
}

func TestPlanQueryVirtualNodeSizeMustDivideTheTeam(t *testing.T) {
	_, err := PlanQuery(GroupConfig{NumExperts: 256, Hidden: 7168, VirtualNodeSize: 3}, 4, 4, 1)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "virtual_node_size") {
		t.Errorf("VirtualNodeSize 3 on a team of 4: %v, want ErrInvalidArgument naming virtual_node_size", err)
	}
}

// AllocCtx must not point to Go memory (GroupConfig's doc): it travels inside the C config
// struct, which lives in Go memory, so cgo's argument check panics rather than letting C
// keep a Go pointer.
func TestAllocCtxInGoMemoryIsRefusedByCgo(t *testing.T) {
	if strings.Contains(os.Getenv("GODEBUG"), "cgocheck=0") {
		t.Skip("GODEBUG=cgocheck=0 turns cgo's pointer check off")
	}
	ctx := new([64]byte)
	defer func() {
		if recovered := recover(); recovered == nil || !strings.Contains(fmt.Sprint(recovered), "Go pointer") {
			t.Errorf("PlanQuery with AllocCtx in Go memory: recovered %v, want cgo's Go pointer panic", recovered)
		}
	}()
	_, _ = PlanQuery(GroupConfig{NumExperts: 256, Hidden: 7168, AllocCtx: unsafe.Pointer(ctx)}, 4, 4, 1)
}
