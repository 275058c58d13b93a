// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// Handle and HTHandle calls against the real library without a GPU. A group or handle whose C pointer
// is zeroed memory (no live magic word) reaches the library, which must refuse it with
// INVALID_ARGUMENT and a message; the library checks it before any tensor, so the fake
// device addresses below are never dereferenced. Closed or nil objects must be refused by
// the binding without calling the library.

// fakeTensor describes memory that does not exist; only its descriptor is ever read.
func fakeTensor(dtype Dtype, shape ...int64) Tensor {
	return Tensor{Data: unsafe.Pointer(&fakeDevice), Dtype: dtype, Shape: shape}
}

// fakeDevice gives fake tensors a non-nil address that Go's pointer checks accept.
var fakeDevice [64]byte

// deadObject returns zeroed memory to stand in for a C object; the library reads its
// first word, finds no live magic and refuses it.
func deadObject() unsafe.Pointer {
	memory := make([]uint64, 8)
	return unsafe.Pointer(&memory[0])
}

func groupAt(pointer unsafe.Pointer) *Group {
	group := &Group{comm: AdoptComm(nil)}
	*(*unsafe.Pointer)(unsafe.Pointer(&group.handle)) = pointer
	return group
}

// refAt is a handle of either mode at pointer, counted as open on group.
func refAt(group *Group, pointer unsafe.Pointer) handleRef {
	ref := handleRef{group: group}
	*(*unsafe.Pointer)(unsafe.Pointer(&ref.handle)) = pointer
	group.openHandles++
	return ref
}

func handleAt(group *Group, pointer unsafe.Pointer) *Handle {
	return &Handle{refAt(group, pointer)}
}

func htHandleAt(group *Group, pointer unsafe.Pointer) *HTHandle {
	return &HTHandle{handleRef: refAt(group, pointer), rows: 256, sizing: HTSizingCapacity}
}

func wantError(t *testing.T, what string, err error, status Status, words string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Status != status || !strings.Contains(e.Message, words) {
		t.Errorf("%s: got %v; want %v saying %q", what, err, status, words)
	}
}

func TestNewHandleOnADeadGroupCarriesTheLibraryMessage(t *testing.T) {
	group := groupAt(deadObject())
	handle, err := NewHandle(group, fakeTensor(DtypeInt64, 4, 2), nil)
	if handle != nil {
		t.Fatalf("got a handle %v", handle)
	}
	wantError(t, "NewHandle", err, ErrInvalidArgument, "group is not a live EpcGroup")
	if group.openHandles != 0 {
		t.Errorf("a failed NewHandle counted an open handle")
	}
}

func TestNewHandleChecksItsArgumentsFirst(t *testing.T) {
	_, err := NewHandle(nil, fakeTensor(DtypeInt64, 4, 2), nil)
	wantError(t, "nil group", err, ErrInvalidArgument, "Group is nil")
	closed := &Group{comm: AdoptComm(nil)}
	_, err = NewHandle(closed, fakeTensor(DtypeInt64, 4, 2), nil)
	wantError(t, "closed group", err, ErrInvalidArgument, "Group is closed")
	_, err = NewHandle(groupAt(deadObject()), fakeTensor(DtypeInt64, 1, 1, 1, 1, 2), nil)
	wantError(t, "5-D topk_idx", err, ErrInvalidArgument, "tensor topk_idx has 5 dimensions")
	_, err = NewHandle(groupAt(deadObject()), fakeTensor(DtypeInt64, 4, -2), nil)
	wantError(t, "negative extent", err, ErrInvalidArgument, "negative extent -2")
	strided := fakeTensor(DtypeInt64, 4, 2)
	strided.Strides = []int64{2}
	_, err = NewHandle(groupAt(deadObject()), strided, nil)
	wantError(t, "one stride for two dimensions", err, ErrInvalidArgument, "1 strides for 2 dimensions")
}

func TestEveryCallOnADeadHandleIsRefusedByTheLibrary(t *testing.T) {
	group := groupAt(deadObject())
	handle := handleAt(group, deadObject())
	x := fakeTensor(DtypeBF16, 4, 2048)
	weights := fakeTensor(DtypeFP32, 4, 2)
	outX := fakeTensor(DtypeBF16, 4, 256, 2048)
	counts := fakeTensor(DtypeInt32, 4)
	const dead = "handle is not a live EpcHandle"
	wantError(t, "Update", handle.Update(fakeTensor(DtypeInt64, 4, 2), nil), ErrInvalidArgument, dead)
	wantError(t, "LLDispatch", handle.LLDispatch(x, weights, outX, counts, FlagNone, nil), ErrInvalidArgument, dead)
	wantError(t, "LLDispatch send-only", handle.LLDispatch(x, weights, outX, counts, FlagSendOnly, nil),
		ErrInvalidArgument, dead)
	fp8X := fakeTensor(DtypeFP8E4M3, 4, 256, 2048)
	scales := fakeTensor(DtypeFP32, 4, 256, 16)
	wantError(t, "LLDispatchFP8", handle.LLDispatchFP8(x, weights, fp8X, scales, counts, FlagNone, nil),
		ErrInvalidArgument, dead)
	wantError(t, "LLDispatchFP8 send-only, power-of-two scales",
		handle.LLDispatchFP8(x, weights, fp8X, scales, counts, FlagSendOnly|FlagFP8Pow2Scales, nil),
		ErrInvalidArgument, dead)
	wantError(t, "LLCombine", handle.LLCombine(outX, x, FlagNone, nil), ErrInvalidArgument, dead)
	wantError(t, "Complete", handle.Complete(nil), ErrInvalidArgument, dead)

	// Close reports the library's refusal, and the handle is gone either way.
	wantError(t, "Close", handle.Close(), ErrInvalidArgument, dead)
	if group.openHandles != 0 {
		t.Errorf("Close left %d open handles counted", group.openHandles)
	}
	if err := handle.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestClosedAndNilHandlesAreRefusedWithoutTheLibrary(t *testing.T) {
	group := groupAt(deadObject())
	closed := &Handle{handleRef{group: group}} // what Close leaves behind
	x := fakeTensor(DtypeBF16, 4, 2048)
	for name, err := range map[string]error{
		"Update":        closed.Update(fakeTensor(DtypeInt64, 4, 2), nil),
		"LLDispatch":    closed.LLDispatch(x, x, x, x, FlagNone, nil),
		"LLDispatchFP8": closed.LLDispatchFP8(x, x, x, x, x, FlagFP8Pow2Scales, nil),
		"LLCombine":     closed.LLCombine(x, x, FlagSendOnly, nil),
		"Complete":      closed.Complete(nil),
	} {
		wantError(t, name, err, ErrInvalidArgument, "the Handle is closed")
	}
	var none *Handle
	wantError(t, "nil Complete", none.Complete(nil), ErrInvalidArgument, "the Handle is nil")
	if err := none.Close(); err != nil {
		t.Errorf("nil Close: %v", err)
	}
	// A bad tensor is reported by name before the handle is looked at.
	err := closed.LLCombine(x, fakeTensor(DtypeBF16, 1, 1, 1, 1, 1), FlagNone, nil)
	wantError(t, "5-D out", err, ErrInvalidArgument, "tensor out has 5 dimensions")
	err = closed.LLDispatchFP8(x, x, x, fakeTensor(DtypeFP32, 1, 1, 1, 1, 1), x, FlagNone, nil)
	wantError(t, "5-D out_scales", err, ErrInvalidArgument, "tensor out_scales has 5 dimensions")
}

func TestGroupCloseWaitsForItsHandles(t *testing.T) {
	group := groupAt(deadObject())
	handle := handleAt(group, deadObject())
	htHandle := htHandleAt(group, deadObject())
	err := group.Close()
	wantError(t, "Group.Close with open handles", err, ErrInvalidArgument, "2 handle(s)")
	if group.handle == nil {
		t.Fatal("the refused Close forgot the group")
	}
	handle.Close() // refused by the library (a dead handle) but forgotten here
	err = group.Close()
	wantError(t, "Group.Close with an open HTHandle", err, ErrInvalidArgument, "1 handle(s)")
	htHandle.Close()
	// Now the group closes: the library refuses the dead group, and the Group is gone.
	wantError(t, "Group.Close", group.Close(), ErrInvalidArgument, "group is not a live EpcGroup")
	if err := group.Close(); err != nil {
		t.Errorf("second Group.Close: %v", err)
	}
}

func TestNewHTHandleOnADeadGroupCarriesTheLibraryMessage(t *testing.T) {
	for _, sizing := range []HtSizing{HTSizingExact, HTSizingCapacity} {
		group := groupAt(deadObject())
		handle, err := NewHTHandle(group, fakeTensor(DtypeInt32, 4, 2), sizing, nil)
		if handle != nil {
			t.Fatalf("%v: got a handle %v", sizing, handle)
		}
		wantError(t, sizing.String(), err, ErrInvalidArgument, "group is not a live EpcGroup")
		if group.openHandles != 0 {
			t.Errorf("%v: a failed NewHTHandle counted an open handle", sizing)
		}
	}
	_, err := NewHTHandle(nil, fakeTensor(DtypeInt64, 4, 2), HTSizingExact, nil)
	wantError(t, "nil group", err, ErrInvalidArgument, "NewHTHandle: the Group is nil")
	_, err = NewHTHandle(&Group{comm: AdoptComm(nil)}, fakeTensor(DtypeInt64, 4, 2), HTSizingExact, nil)
	wantError(t, "closed group", err, ErrInvalidArgument, "Group is closed")
	_, err = NewHTHandle(groupAt(deadObject()), fakeTensor(DtypeInt64, 1, 1, 1, 1, 2), HTSizingCapacity, nil)
	wantError(t, "5-D topk_idx", err, ErrInvalidArgument, "tensor topk_idx has 5 dimensions")
}

// htCalls makes every HTHandle call once (dispatch with no, all and fp8 optional tensors;
// combine with and without backward weights), each with its name.
func htCalls(h *HTHandle) map[string]error {
	x, outX := fakeTensor(DtypeBF16, 4, 2048), fakeTensor(DtypeBF16, 256, 2048)
	weights, outWeights := fakeTensor(DtypeFP32, 4, 2), fakeTensor(DtypeFP32, 256, 2)
	outIdx, counts, numRecv := fakeTensor(DtypeInt32, 256, 2), fakeTensor(DtypeInt32, 4), fakeTensor(DtypeInt32, 1)
	scales, outScales := fakeTensor(DtypeFP32, 4, 16), fakeTensor(DtypeFP32, 256, 16)
	every := HTDispatchArgs{X: x, OutX: outX, TopkWeights: &weights, OutTopkWeights: &outWeights,
		OutTopkIdx: &outIdx, OutExpertCounts: &counts, OutNumRecv: &numRecv}
	fp8 := HTDispatchArgs{X: fakeTensor(DtypeFP8E4M3, 4, 2048), XScales: &scales,
		OutX: fakeTensor(DtypeFP8E4M3, 256, 2048), OutScales: &outScales, Flags: 0x80}
	return map[string]error{
		"Update":                    h.Update(fakeTensor(DtypeInt64, 4, 2), nil),
		"Dispatch":                  h.Dispatch(HTDispatchArgs{X: x, OutX: outX}, nil),
		"Dispatch, every output":    h.Dispatch(every, nil),
		"Dispatch, fp8":             h.Dispatch(fp8, nil),
		"Combine":                   h.Combine(outX, nil, x, nil, FlagNone, nil),
		"Combine, backward weights": h.Combine(outX, &outWeights, x, &weights, FlagBackwardWeights, nil),
	}
}

func TestEveryHTCallOnADeadHandleIsRefusedByTheLibrary(t *testing.T) {
	group := groupAt(deadObject())
	handle := htHandleAt(group, deadObject())
	if handle.Rows() != 256 || handle.Sizing() != HTSizingCapacity {
		t.Errorf("Rows %d, Sizing %v", handle.Rows(), handle.Sizing())
	}
	const dead = "handle is not a live EpcHandle"
	for name, err := range htCalls(handle) {
		wantError(t, name, err, ErrInvalidArgument, dead)
	}
	wantError(t, "Close", handle.Close(), ErrInvalidArgument, dead)
	if group.openHandles != 0 {
		t.Errorf("Close left %d open handles counted", group.openHandles)
	}
	if err := handle.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestClosedAndNilHTHandlesAreRefusedWithoutTheLibrary(t *testing.T) {
	closed := &HTHandle{handleRef: handleRef{group: groupAt(deadObject())}}
	for name, err := range htCalls(closed) {
		wantError(t, name, err, ErrInvalidArgument, "the HTHandle is closed")
	}
	var none *HTHandle
	wantError(t, "nil Update", none.Update(fakeTensor(DtypeInt64, 4, 2), nil), ErrInvalidArgument, "the HTHandle is nil")
	if err := none.Close(); err != nil {
		t.Errorf("nil Close: %v", err)
	}
	// A bad optional tensor is reported by its C name before the handle is looked at.
	x, bad := fakeTensor(DtypeBF16, 4, 2048), fakeTensor(DtypeFP32, 1, 1, 1, 1, 1)
	err := closed.Dispatch(HTDispatchArgs{X: x, OutX: x, OutNumRecv: &bad}, nil)
	wantError(t, "5-D out_num_recv", err, ErrInvalidArgument, "tensor out_num_recv has 5 dimensions")
	err = closed.Combine(x, nil, x, &bad, FlagBackwardWeights, nil)
	wantError(t, "5-D out_topk_weights", err, ErrInvalidArgument, "tensor out_topk_weights has 5 dimensions")
}

func TestHTSizingNames(t *testing.T) {
	if HTSizingExact.String() != "HTSizingExact" || HTSizingCapacity.String() != "HTSizingCapacity" ||
		HtSizing(7).String() != "HtSizing(7)" {
		t.Errorf("names %v %v %v", HTSizingExact, HTSizingCapacity, HtSizing(7))
	}
	if FlagBackwardWeights&(FlagSendOnly|FlagFP8Pow2Scales) != 0 {
		t.Errorf("FlagBackwardWeights %#x overlaps another flag", FlagBackwardWeights)
	}
}

func TestTensorDescriptor(t *testing.T) {
	c, err := Tensor{Data: unsafe.Pointer(&fakeDevice), Dtype: DtypeBF16, Shape: []int64{3, 8}}.toC("x")
	if err != nil {
		t.Fatal(err)
	}
	if c.ndim != 2 || c.shape[0] != 3 || c.shape[1] != 8 || c.shape[2] != 0 || c.strides[0] != 0 ||
		c.dtype != 1 || unsafe.Pointer(c.data) != unsafe.Pointer(&fakeDevice) {
		t.Errorf("descriptor %+v", c)
	}
	c, err = Tensor{Dtype: DtypeFP32, Shape: []int64{4, 8}, Strides: []int64{16, 1}}.toC("w")
	if err != nil || c.strides[0] != 16 || c.strides[1] != 1 {
		t.Errorf("strided descriptor %+v, %v", c, err)
	}
}

func TestAsyncErrorOfADeadGroupCarriesTheLibraryMessage(t *testing.T) {
	wantError(t, "dead group", groupAt(deadObject()).AsyncError(), ErrInvalidArgument,
		"group is not a live EpcGroup")
	wantError(t, "closed group", (&Group{comm: AdoptComm(nil)}).AsyncError(), ErrInvalidArgument,
		"Group is closed")
	var none *Group
	wantError(t, "nil group", none.AsyncError(), ErrInvalidArgument, "AsyncError: the Group is nil")
}

func TestAsyncErrorDoesNotWaitForTheGroupsOtherCalls(t *testing.T) {
	group := groupAt(deadObject())
	group.mu.Lock() // as a Barrier or a handle's call in progress holds it
	defer group.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- group.AsyncError() }()
	select {
	case err := <-done:
		wantError(t, "while the group's lock is held", err, ErrInvalidArgument, "not a live EpcGroup")
	case <-time.After(10 * time.Second):
		t.Fatal("AsyncError waited for the lock of the group's other calls")
	}
}

func TestGroupAsyncErrorIsTheLastEntryOfTheTable(t *testing.T) {
	size, version, err := functionTableHeader()
	if err != nil {
		t.Fatalf("the function table: %v", err)
	}
	end := groupAsyncErrorEntry.offset + groupAsyncErrorEntry.size
	if uintptr(size) != end || version != ABIVersion {
		t.Errorf("this library's table has %d bytes (ABI %d); group_async_error ends at byte %d (ABI %d)",
			size, version, end, ABIVersion)
	}
	if err := groupAsyncErrorEntry.missingFrom(size, version, false); err != nil {
		t.Errorf("this library's table: %v", err)
	}
}

func TestGroupAsyncErrorPastAnOlderTableIsUnsupported(t *testing.T) {
	// An ABI 1.2 table ends where group_async_error begins.
	older := uint32(groupAsyncErrorEntry.offset)
	wantError(t, "ABI 1.2 table", groupAsyncErrorEntry.missingFrom(older, 10200, false), ErrUnsupported,
		"(ABI 1.2.0) has no group_async_error in its function table")
	full := uint32(groupAsyncErrorEntry.offset + groupAsyncErrorEntry.size)
	wantError(t, "NULL entry", groupAsyncErrorEntry.missingFrom(full, 10300, true), ErrUnsupported,
		"left group_async_error NULL")
	if err := groupAsyncErrorEntry.missingFrom(full, 10300, false); err != nil {
		t.Errorf("a table that has the entry: %v", err)
	}
}
