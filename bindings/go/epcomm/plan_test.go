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
