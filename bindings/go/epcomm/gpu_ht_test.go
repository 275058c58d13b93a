// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/epcomm/epcomm/bindings/go/internal/cudadrv"
)

// High-throughput dispatch and combine on real GPUs, one goroutine per GPU, on the
// low-latency test's tokens and routing with the HT semantics of ht_model_test.go. Step 0
// runs on an exact-sized handle created with its routing, with every optional output and
// backward weights; step 1 on a capacity-sized handle created without routing (as before
// graph capture) and routed by Update. Everything the library writes is compared bit for
// bit with the model. Local errors that need a live group (a layout the mode does not
// serve, send-only steps, shapes, backward weights without their output) are checked too. Runs with EPCOMM_TEST_GPUS=N, N >= 2.

const htMaxTopK = 4

// htBuffers is one rank's device memory, sized for capacity rows.
type htBuffers struct {
	topkIdx, x, weights                       *cudadrv.Buffer
	outX, outIdx, outWeights, counts, numRecv *cudadrv.Buffer
	rows, returned, out, backWeights          *cudadrv.Buffer
	all                                       []*cudadrv.Buffer
}

func newHTBuffers(c llCase) (*htBuffers, error) {
	t, k, h, n := c.maxTokens, c.topk, c.hidden, c.nranks*c.maxTokens
	sizes := []int{t * k * 8, t * h * 2, t * k * 4, n * h * 2, n * k * 4, n * k * 4, c.expertsPerRank * 4, 4,
		n * h * 2, n * k * 4, t * h * 2, t * k * 4}
	b := &htBuffers{}
	for _, size := range sizes {
		buffer, err := cudadrv.Alloc(size)
		if err != nil {
			b.free()
			return nil, err
		}
		b.all = append(b.all, buffer)
	}
	for i, field := range []**cudadrv.Buffer{&b.topkIdx, &b.x, &b.weights, &b.outX, &b.outIdx, &b.outWeights,
		&b.counts, &b.numRecv, &b.rows, &b.returned, &b.out, &b.backWeights} {
		*field = b.all[i]
	}
	return b, nil
}

func (b *htBuffers) free() {
	for _, buffer := range b.all {
		buffer.Free()
	}
}

// stage uploads rank's inputs of step and clears every output.
func (b *htBuffers) stage(c llCase, step, rank int) error {
	return stageStep(c, step, rank, b.topkIdx, b.x, b.weights, b.all[3:]...)
}

// download reads count elements of b into *into.
func download[T any](into *[]T, b *cudadrv.Buffer, count int) error {
	values, err := cudadrv.Download[T](b, count)
	*into = values
	return err
}

// sameValues says whether a and b hold the same values (nil and empty alike).
func sameValues[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// htCheckReceived compares what the library wrote for the model's rows with the model.
func htCheckReceived(c llCase, b *htBuffers, step int, want htReceived) (x []uint16, idx []int32, w []float32, err error) {
	n := len(want.sources)
	var numRecv, counts []int32
	for _, e := range []error{download(&numRecv, b.numRecv, 1), download(&counts, b.counts, c.expertsPerRank),
		download(&idx, b.outIdx, n*c.topk), download(&w, b.outWeights, n*c.topk), download(&x, b.outX, n*c.hidden)} {
		if e != nil {
			return nil, nil, nil, e
		}
	}
	switch {
	case int(numRecv[0]) != n:
		err = fmt.Errorf("step %d: num_recv %d, expected %d", step, numRecv[0], n)
	case !sameValues(counts, want.expertCounts):
		err = fmt.Errorf("step %d: expert counts %v, expected %v", step, counts, want.expertCounts)
	case !sameValues(idx, want.topkIdx):
		err = fmt.Errorf("step %d: topk_idx %v, expected %v", step, idx, want.topkIdx)
	case !sameValues(w, want.topkWeights):
		err = fmt.Errorf("step %d: weights %v, expected %v", step, w, want.topkWeights)
	default:
		if problem := firstDifference(fmt.Sprintf("step %d: received token", step), x, want.x, c.hidden); problem != "" {
			err = errors.New(problem)
		}
	}
	return x, idx, w, err
}

// htStep runs one step on h, whose routing is step's; backward adds the weights' way back.
func htStep(c llCase, b *htBuffers, h *Handle, step, rank int, backward bool) error {
	rows, err := htRows(h)
	if err != nil {
		return err
	}
	tokens, hidden, k := int64(c.tokens(step, rank)), int64(c.hidden), int64(c.topk)
	err = h.Dispatch(&DispatchArgs{X: tensorOn(b.x, DtypeBF16, tokens, hidden), OutX: tensorOn(b.outX, DtypeBF16, rows, hidden),
		TopKWeights: tensorOn(b.weights, DtypeFP32, tokens, k), OutTopKWeights: tensorOn(b.outWeights, DtypeFP32, rows, k),
		OutTopKIdx: tensorOn(b.outIdx, DtypeInt32, rows, k), OutExpertCounts: tensorOn(b.counts, DtypeInt32, int64(c.expertsPerRank)),
		OutNumRecv: tensorOn(b.numRecv, DtypeInt32, 1)}, 0)
	if err != nil {
		return fmt.Errorf("Dispatch: %w", err)
	}
	x, idx, w, err := htCheckReceived(c, b, step, c.htDispatch(step, rank))
	if err != nil {
		return err
	}

	// The experts, on the host; rows past N (capacity sizing) stay zero.
	if err := cudadrv.Upload(b.rows, c.htExpertRows(rank, x, idx, w)); err != nil {
		return err
	}
	if err := cudadrv.Upload(b.returned, c.htReturnedWeights(rank, w)); err != nil {
		return err
	}
	combine := &CombineArgs{X: tensorOn(b.rows, DtypeBF16, rows, hidden), Out: tensorOn(b.out, DtypeBF16, tokens, hidden)}
	if backward {
		combine.TopKWeights = tensorOn(b.returned, DtypeFP32, rows, k)
		combine.OutTopKWeights = tensorOn(b.backWeights, DtypeFP32, tokens, k)
	}
	if err = h.Combine(combine, 0); err != nil {
		return fmt.Errorf("Combine: %w", err)
	}
	wantOut, wantWeights := c.htCombine(step, rank)
	var got []uint16
	if err := download(&got, b.out, len(wantOut)); err != nil {
		return err
	}
	if problem := firstDifference(fmt.Sprintf("step %d: combined token", step), got, wantOut, c.hidden); problem != "" {
		return errors.New(problem)
	}
	if !backward {
		return nil
	}
	var gotWeights []float32
	if err := download(&gotWeights, b.backWeights, len(wantWeights)); err != nil {
		return err
	}
	if !sameValues(gotWeights, wantWeights) {
		return fmt.Errorf("step %d: backward weights %v, expected %v", step, gotWeights, wantWeights)
	}
	return nil
}

// htRows is the handle's row count (HandleInfo.Rows).
func htRows(h *Handle) (int64, error) {
	info, err := h.Query()
	if err != nil {
		return 0, fmt.Errorf("Query: %w", err)
	}
	return info.Rows, nil
}

// htLocalErrors: refused by the library before any communication; every rank makes the
// same calls. exact holds step 0's routing.
func htLocalErrors(c llCase, b *htBuffers, group *Group, exact *Handle, rank int) error {
	rows, err := htRows(exact)
	if err != nil {
		return err
	}
	tokens, hidden, k := int64(c.tokens(0, rank)), int64(c.hidden), int64(c.topk)
	_, err = CreateHandle(group, &HandleConfig{Layout: LayoutExpertPadded}, nil, 0)
	checks := []error{refused("an expert-padded layout on a high-throughput group", err, ErrUnsupported, "layout")}
	x := tensorOn(b.x, DtypeBF16, tokens, hidden)
	err = exact.Dispatch(&DispatchArgs{X: x, OutX: tensorOn(b.outX, DtypeBF16, rows+1, hidden)}, 0)
	checks = append(checks, refused("dispatch into one row more", err, ErrInvalidArgument, "out_x"))
	err = exact.Dispatch(&DispatchArgs{Flags: StepSendOnly, SendSMs: 1 << 20, X: x,
		OutX: tensorOn(b.outX, DtypeBF16, rows, hidden)}, 0)
	checks = append(checks, refused("a send-only dispatch on more SMs than the GPU has", err, ErrInvalidArgument,
		"send_sms"))
	y, out := tensorOn(b.rows, DtypeBF16, rows, hidden), tensorOn(b.out, DtypeBF16, tokens, hidden)
	err = exact.Combine(&CombineArgs{X: y, TopKWeights: tensorOn(b.returned, DtypeFP32, rows, k), Out: out}, 0)
	checks = append(checks, refused("backward weights without their output", err, ErrInvalidArgument, "out_topk_weights"))
	err = exact.Combine(&CombineArgs{Weighting: WeightingSender, X: y, Out: out}, 0)
	checks = append(checks, refused("sender weighting on a flat layout", err, ErrInvalidArgument, "weighting"))
	checks = append(checks, refused("Complete with nothing pending", exact.Complete(0), ErrInvalidUsage, ""))
	return joinProblems(checks)
}

// htRank is one rank's whole life. The caller holds runtime.LockOSThread.
func htRank(id UniqueID, c llCase, rank int) (err error) {
	comm, err := InitComm(id, c.nranks, rank, rank)
	if err != nil {
		return fmt.Errorf("InitComm: %w", err)
	}
	defer comm.Close() // after a failure below; a no-op after the Close at the end
	if err := cudadrv.UseDevice(rank); err != nil {
		return err
	}
	cfg := GroupConfig{Mode: ModeHighThroughput, NumExperts: uint32(c.experts()), Hidden: uint32(c.hidden),
		MaxTokensPerRank: uint32(c.maxTokens), MaxTopK: htMaxTopK, Timeout: 20 * time.Second}
	group, err := NewGroup(comm, cfg)
	if err != nil {
		return fmt.Errorf("NewGroup: %w", err)
	}
	defer group.Close()
	b, err := newHTBuffers(c)
	if err != nil {
		return err
	}
	defer b.free()

	if err := b.stage(c, 0, rank); err != nil {
		return err
	}
	idx := tensorOn(b.topkIdx, DtypeInt64, int64(c.tokens(0, rank)), int64(c.topk))
	exact, err := CreateHandle(group, &HandleConfig{Sizing: SizingExact}, routing(idx), 0)
	if err != nil {
		return fmt.Errorf("CreateHandle (exact): %w", err)
	}
	defer exact.Close()
	info, err := exact.Query()
	if n := len(c.htDispatch(0, rank).sources); err != nil || info.Rows != int64(n) || info.Layout != LayoutFlat ||
		info.Sizing != SizingExact || info.Mode != ModeHighThroughput || info.TopK != uint32(c.topk) {
		return fmt.Errorf("exact handle: %+v, %v; expected N = %d rows", info, err, n)
	}
	if err := htStep(c, b, exact, 0, rank, true); err != nil {
		return err
	}
	if err := htLocalErrors(c, b, group, exact, rank); err != nil {
		return err
	}
	if err := exact.Close(); err != nil {
		return fmt.Errorf("Handle.Close: %w", err)
	}

	capacity, err := CreateHandle(group, nil, nil, 0)
	if err != nil {
		return fmt.Errorf("CreateHandle (capacity, no routing): %w", err)
	}
	defer capacity.Close()
	if rows, err := htRows(capacity); err != nil || rows != int64(c.nranks*c.maxTokens) {
		return fmt.Errorf("capacity handle: %d rows (%v)", rows, err)
	}
	if err := b.stage(c, 1, rank); err != nil {
		return err
	}
	if err := capacity.Update(routing(tensorOn(b.topkIdx, DtypeInt64, int64(c.tokens(1, rank)), int64(c.topk))), 0); err != nil {
		return fmt.Errorf("Update: %w", err)
	}
	if err := htStep(c, b, capacity, 1, rank, false); err != nil {
		return err
	}
	if err := capacity.Close(); err != nil {
		return fmt.Errorf("Handle.Close: %w", err)
	}
	if err := group.Close(); err != nil {
		return fmt.Errorf("Group.Close: %w", err)
	}
	return comm.Close()
}

func TestHTDispatchCombineOnGPUs(t *testing.T) {
	of := func(n int) llCase { return llCase{nranks: n, expertsPerRank: 4, hidden: 256, topk: 2, maxTokens: 8} }
	runCaseOnGPUs(t, "HT", of, htRank, "exact and capacity HT steps matched the host model")
}
