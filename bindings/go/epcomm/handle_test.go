// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// Handle calls against the real library without a GPU. A group or handle whose C pointer
// is zeroed memory (no live magic word) reaches the library, which must refuse it with
// INVALID_ARGUMENT and a message; the library checks it before any tensor, so the fake
// device addresses below are never dereferenced. Closed or nil objects must be refused by
// the binding without calling the library.

// fakeAddress is a device address that does not exist; only descriptors are ever read.
const fakeAddress DevicePtr = 0x7f0000001000

// fakeTensor describes memory that does not exist.
func fakeTensor(dtype Dtype, shape ...int64) *Tensor {
	return &Tensor{Data: fakeAddress, Dtype: dtype, Shape: shape}
}

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

// handleAt is a handle at pointer, counted as open on group.
func handleAt(group *Group, pointer unsafe.Pointer) *Handle {
	h := &Handle{group: group}
	*(*unsafe.Pointer)(unsafe.Pointer(&h.handle)) = pointer
	group.openHandles++
	return h
}

func wantError(t *testing.T, what string, err error, status Status, words string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Status != status || !strings.Contains(e.Message, words) {
		t.Errorf("%s: got %v; want %v saying %q", what, err, status, words)
	}
}

func routing(idx *Tensor) *Routing { return &Routing{TopKIdx: idx} }

func TestCreateHandleOnADeadGroupCarriesTheLibraryMessage(t *testing.T) {
	for name, r := range map[string]*Routing{"without routing": nil, "with routing": routing(fakeTensor(DtypeInt64, 4, 2))} {
		for _, cfg := range []*HandleConfig{nil, {Sizing: SizingExact}} {
			group := groupAt(deadObject())
			handle, err := CreateHandle(group, cfg, r, 0)
			if handle != nil {
				t.Fatalf("%s: got a handle %v", name, handle)
			}
			wantError(t, name, err, ErrInvalidArgument, "group is not a live EpcGroup")
			if group.openHandles != 0 {
				t.Errorf("%s: a failed CreateHandle counted an open handle", name)
			}
		}
	}
}

func TestCreateHandleChecksItsArgumentsFirst(t *testing.T) {
	_, err := CreateHandle(nil, nil, nil, 0)
	wantError(t, "nil group", err, ErrInvalidArgument, "CreateHandle: the Group is nil")
	closed := &Group{comm: AdoptComm(nil)}
	_, err = CreateHandle(closed, nil, routing(fakeTensor(DtypeInt64, 4, 2)), 0)
	wantError(t, "closed group", err, ErrInvalidArgument, "Group is closed")
	_, err = CreateHandle(groupAt(deadObject()), nil, routing(fakeTensor(DtypeInt64, 1, 1, 1, 1, 2)), 0)
	wantError(t, "5-D topk_idx", err, ErrInvalidArgument, "tensor topk_idx has 5 dimensions")
	_, err = CreateHandle(groupAt(deadObject()), nil, &Routing{TopKIdx: fakeTensor(DtypeInt64, 4, 2),
		NumTokens: fakeTensor(DtypeInt32, 1, 1, 1, 1, 1)}, 0)
	wantError(t, "5-D num_tokens", err, ErrInvalidArgument, "tensor num_tokens has 5 dimensions")
	_, err = CreateHandle(groupAt(deadObject()), nil, routing(fakeTensor(DtypeInt64, 4, -2)), 0)
	wantError(t, "negative extent", err, ErrInvalidArgument, "negative extent -2")
	strided := fakeTensor(DtypeInt64, 4, 2)
	strided.Strides = []int64{2}
	_, err = CreateHandle(groupAt(deadObject()), nil, routing(strided), 0)
	wantError(t, "one stride for two dimensions", err, ErrInvalidArgument, "1 strides for 2 dimensions")
}

// llArgs and htArgs are a full LL (fp8) and HT (every output, backward weights) step.
func llArgs() (*DispatchArgs, *CombineArgs) {
	x := fakeTensor(DtypeBF16, 4, 2048)
	outX := fakeTensor(DtypeFP8E4M3, 4, 256, 2048)
	d := &DispatchArgs{Flags: StepSendOnly | DispatchPow2Scales, Quant: QuantFP8, X: x,
		TopKWeights: fakeTensor(DtypeFP32, 4, 2), OutX: outX, OutScales: fakeTensor(DtypeFP32, 4, 256, 16),
		OutExpertCounts: fakeTensor(DtypeInt32, 4), AccExpertCounts: fakeTensor(DtypeInt64, 4)}
	c := &CombineArgs{Flags: StepSendOnly, X: fakeTensor(DtypeBF16, 4, 256, 2048), Out: fakeTensor(DtypeFP32, 4, 2048)}
	return d, c
}

func htArgs() (*DispatchArgs, *CombineArgs) {
	d := &DispatchArgs{X: fakeTensor(DtypeBF16, 4, 2048), TopKWeights: fakeTensor(DtypeFP32, 4, 2),
		OutX: fakeTensor(DtypeBF16, 256, 2048), OutTopKIdx: fakeTensor(DtypeInt32, 256, 2),
		OutTopKWeights: fakeTensor(DtypeFP32, 256, 2), OutExpertCounts: fakeTensor(DtypeInt32, 4),
		OutNumRecv: fakeTensor(DtypeInt32, 1)}
	c := &CombineArgs{X: fakeTensor(DtypeBF16, 256, 2048), TopKWeights: fakeTensor(DtypeFP32, 256, 2),
		Out: fakeTensor(DtypeBF16, 4, 2048), OutTopKWeights: fakeTensor(DtypeFP32, 4, 2)}
	return d, c
}

// handleCalls makes every Handle call once, each with its name.
func handleCalls(h *Handle) map[string]error {
	lld, llc := llArgs()
	htd, htc := htArgs()
	_, queryErr := h.Query()
	return map[string]error{
		"Update":          h.Update(routing(fakeTensor(DtypeInt64, 4, 2)), 0),
		"Query":           queryErr,
		"Dispatch (LL)":   h.Dispatch(lld, 0),
		"Dispatch (HT)":   h.Dispatch(htd, 1234),
		"Combine (LL)":    h.Combine(llc, 0),
		"Combine (HT)":    h.Combine(htc, 1234),
		"Complete":        h.Complete(0),
		"Complete stream": h.Complete(Stream(0x5000)),
	}
}

func TestEveryCallOnADeadHandleIsRefusedByTheLibrary(t *testing.T) {
	group := groupAt(deadObject())
	handle := handleAt(group, deadObject())
	const dead = "handle is not a live EpcHandle"
	for name, err := range handleCalls(handle) {
		wantError(t, name, err, ErrInvalidArgument, dead)
	}
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
	closed := &Handle{group: groupAt(deadObject())} // what Close leaves behind
	for name, err := range handleCalls(closed) {
		wantError(t, name, err, ErrInvalidArgument, "the Handle is closed")
	}
	var none *Handle
	for name, err := range handleCalls(none) {
		wantError(t, "nil "+name, err, ErrInvalidArgument, "the Handle is nil")
	}
	if err := none.Close(); err != nil {
		t.Errorf("nil Close: %v", err)
	}
}

// Every tensor field is reported by its C name when its descriptor is bad, before the
// handle is looked at.
func TestBadTensorsAreNamedByTheirCField(t *testing.T) {
	closed := &Handle{group: groupAt(deadObject())}
	bad := fakeTensor(DtypeFP32, 1, 1, 1, 1, 1)
	d := &DispatchArgs{}
	for _, field := range d.fields() {
		args := &DispatchArgs{}
		setField(t, args, field.name, bad)
		wantError(t, "dispatch "+field.name, closed.Dispatch(args, 0), ErrInvalidArgument,
			"tensor "+field.name+" has 5 dimensions")
	}
	c := &CombineArgs{}
	for _, field := range c.fields() {
		args := &CombineArgs{}
		setField(t, args, field.name, bad)
		wantError(t, "combine "+field.name, closed.Combine(args, 0), ErrInvalidArgument,
			"tensor "+field.name+" has 5 dimensions")
	}
	err := closed.Update(&Routing{TopKIdx: fakeTensor(DtypeInt64, 4, 2), NumTokens: bad}, 0)
	wantError(t, "update num_tokens", err, ErrInvalidArgument, "tensor num_tokens has 5 dimensions")
}

// goWords spells the C words that Go names write as initialisms or compounds.
var goWords = map[string]string{"topk": "TopK"}

// setField sets the Go field whose C name is cName (x_scales -> XScales, topk_idx ->
// TopKIdx) through the args' own field list, so a field missing from fields() fails here.
func setField(t *testing.T, args interface{}, cName string, tensor *Tensor) {
	t.Helper()
	goName := ""
	for _, word := range strings.Split(cName, "_") {
		if spelled, ok := goWords[word]; ok {
			goName += spelled
			continue
		}
		goName += strings.ToUpper(word[:1]) + word[1:]
	}
	field := reflect.ValueOf(args).Elem().FieldByName(goName)
	if !field.IsValid() || field.Type() != reflect.TypeOf(tensor) {
		t.Fatalf("no *Tensor field %s for the C field %s", goName, cName)
	}
	field.Set(reflect.ValueOf(tensor))
}

// The C side puts each Go field into the C field of the same name, and copies the scalar
// fields: every field gets a tensor of its own dtype number, and the assembled struct is
// read back field by field.
func TestArgsReachTheirCFields(t *testing.T) {
	d := &DispatchArgs{Flags: StepSendOnly, Quant: QuantPassthrough, ScaleBlock: 128, ScaleLayout: ScalesSwizzled128x4,
		SendSMs: 4, MaxStepTokens: 8}
	for i, field := range d.fields() {
		setField(t, d, field.name, &Tensor{Dtype: Dtype(100 + i)})
	}
	got, err := d.probe()
	if err != nil {
		t.Fatal(err)
	}
	cDispatch := []string{"x", "x_scales", "x_global_scale", "topk_weights", "out_x", "out_scales", "out_topk_idx",
		"out_topk_weights", "out_expert_counts", "out_expert_offsets", "out_rank_counts", "out_num_recv",
		"out_expert_counts_host", "acc_expert_counts"}
	checkProbe(t, "dispatch", d.fields(), cDispatch, got[:14])
	if want := [6]uint32{StepSendOnly, uint32(QuantPassthrough), 128, uint32(ScalesSwizzled128x4), 4, 8}; *(*[6]uint32)(got[14:]) != want {
		t.Errorf("dispatch scalars %v, want %v", got[14:], want)
	}
	// Absent fields stay NULL, unset scalars 0 (the defaults).
	if got, err := (&DispatchArgs{X: &Tensor{Dtype: 7}}).probe(); err != nil || got[0] != 7 || got[1] != 0 || got[13] != 0 ||
		got[18] != 0 || got[19] != 0 {
		t.Errorf("a dispatch with x only: %v, %v", got, err)
	}

	c := &CombineArgs{Flags: StepSendOnly, Weighting: WeightingHome, SendSMs: 1}
	for i, field := range c.fields() {
		setField(t, c, field.name, &Tensor{Dtype: Dtype(200 + i)})
	}
	gotC, err := c.probe()
	if err != nil {
		t.Fatal(err)
	}
	checkProbe(t, "combine", c.fields(), []string{"x", "topk_weights", "home_topk_weights", "out", "out_topk_weights"}, gotC[:5])
	if gotC[5] != StepSendOnly || gotC[6] != uint32(WeightingHome) || gotC[7] != 1 {
		t.Errorf("combine scalars %v", gotC[5:])
	}
}

// checkProbe compares, for every C field (cFields, in the probe's order), the dtype the
// assembled struct holds with the one given to the Go field of that C name.
func checkProbe(t *testing.T, what string, fields []tensorField, cFields []string, got []uint32) {
	t.Helper()
	if len(fields) != len(cFields) {
		t.Fatalf("%s: %d Go fields, %d C fields", what, len(fields), len(cFields))
	}
	for i, cName := range cFields {
		var want Dtype
		for _, f := range fields {
			if f.name == cName {
				want = f.tensor.Dtype
			}
		}
		if want == 0 || got[i] != uint32(want) {
			t.Errorf("%s: C field %s holds dtype %d, want %d (the Go field of that name)", what, cName, got[i], want)
		}
	}
}

func TestGroupCloseWaitsForItsHandles(t *testing.T) {
	group := groupAt(deadObject())
	first := handleAt(group, deadObject())
	second := handleAt(group, deadObject())
	wantError(t, "Group.Close with open handles", group.Close(), ErrInvalidUsage, "2 handle(s)")
	if group.handle == nil {
		t.Fatal("the refused Close forgot the group")
	}
	first.Close() // refused by the library (a dead handle) but forgotten here
	wantError(t, "Group.Close with one open handle", group.Close(), ErrInvalidUsage, "1 handle(s)")
	second.Close()
	// Now the group closes: the library refuses the dead group, and the Group is gone.
	wantError(t, "Group.Close", group.Close(), ErrInvalidArgument, "group is not a live EpcGroup")
	if err := group.Close(); err != nil {
		t.Errorf("second Group.Close: %v", err)
	}
}

func TestTensorDescriptor(t *testing.T) {
	var set tensorSet
	c := &set.tensors[0]
	c.ndim = 9 // toC starts from a zero descriptor
	if err := (&Tensor{Data: 0x1234500, Dtype: DtypeBF16, Shape: []int64{3, 8}}).toC("x", c); err != nil {
		t.Fatal(err)
	}
	if c.ndim != 2 || c.shape[0] != 3 || c.shape[1] != 8 || c.shape[2] != 0 || c.strides[0] != 0 || c.dtype != 1 ||
		uintptr(c.data) != 0x1234500 {
		t.Errorf("descriptor %+v", *c)
	}
	err := (&Tensor{Dtype: DtypeFP32, Shape: []int64{4, 8}, Strides: []int64{16, 1}}).toC("w", c)
	if err != nil || c.strides[0] != 16 || c.strides[1] != 1 || uintptr(c.data) != 0 {
		t.Errorf("strided descriptor %+v, %v", *c, err)
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

func TestInfoDoesNotWaitForTheGroupsOtherCalls(t *testing.T) {
	group := groupAt(deadObject())
	group.mu.Lock() // as a Barrier waiting for its peers, or a handle's call, holds it
	defer group.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := group.Info()
		done <- err
	}()
	select {
	case err := <-done:
		wantError(t, "while the group's lock is held", err, ErrInvalidArgument, "not a live EpcGroup")
	case <-time.After(10 * time.Second):
		t.Fatal("Info waited for the lock of the group's other calls")
	}
}

func TestFunctionTableOfABI2(t *testing.T) {
	size, version, complete, err := functionTable(ABIMajor)
	if err != nil {
		t.Fatalf("epc_get_api(%d): %v", ABIMajor, err)
	}
	if version/10000 != ABIMajor || !complete {
		t.Errorf("table: %d bytes, ABI %d, entries are the library's functions: %v", size, version, complete)
	}
	_, _, _, err = functionTable(1)
	wantError(t, "epc_get_api(1)", err, ErrABIMismatch, "")
}

func TestNewStatusCodes(t *testing.T) {
	for _, s := range []Status{ErrCapacity, ErrInvalidUsage} {
		if text := s.Error(); strings.Contains(text, unknownStatusText) {
			t.Errorf("%d: the library does not know it (%q)", int32(s), text)
		}
		err := fmt.Errorf("wrapped: %w", &Error{Status: s, Message: "m"})
		if !errors.Is(err, s) || errors.Is(err, ErrInvalidArgument) {
			t.Errorf("errors.Is does not find %v", s)
		}
	}
}
