// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/epcomm/epcomm/bindings/go/internal/cudadrv"
)

// Low-latency dispatch and combine on real GPUs, one goroutine per GPU (each locked to its
// OS thread): every rank dispatches known tokens, checks what it received against the host
// model (ll_model_test.go), feeds a known function of the received rows to combine, and
// checks the combined tokens bit for bit. Step 0 runs each call whole on a handle created
// with its routing; step 1 updates the routing and runs each call as send-only + Complete;
// the per-expert counts accumulate over both steps. Local errors that need a live group
// (tensor shapes, a layout or sizing the mode refuses, Complete with nothing pending, a
// dispatch while one is pending or before any routing) are checked too. Runs with EPCOMM_TEST_GPUS=N, N >= 2; device memory comes from the CUDA
// driver, loaded at run time (internal/cudadrv).

const llMaxTopK = 4

// llBuffers is one rank's device memory, sized for the largest step.
type llBuffers struct {
	topkIdx, x, weights, outX, outCounts, expertOut, out, accCounts *cudadrv.Buffer
}

func newLLBuffers(c llCase) (*llBuffers, error) {
	expertRows := c.expertsPerRank * c.rowsPerExpert() * c.hidden * 2
	sizes := []int{c.maxTokens * (llMaxTopK + 1) * 8, c.maxTokens * c.hidden * 2, c.maxTokens * (llMaxTopK + 1) * 4,
		expertRows, c.expertsPerRank * 4, expertRows, c.maxTokens * c.hidden * 2, c.expertsPerRank * 8}
	buffers := make([]*cudadrv.Buffer, len(sizes))
	for i, size := range sizes {
		b, err := cudadrv.Alloc(size)
		if err != nil {
			return nil, err
		}
		buffers[i] = b
	}
	return &llBuffers{buffers[0], buffers[1], buffers[2], buffers[3], buffers[4], buffers[5], buffers[6], buffers[7]}, nil
}

func (b *llBuffers) all() []*cudadrv.Buffer {
	return []*cudadrv.Buffer{b.topkIdx, b.x, b.weights, b.outX, b.outCounts, b.expertOut, b.out, b.accCounts}
}

func tensorOn(b *cudadrv.Buffer, dtype Dtype, shape ...int64) *Tensor {
	return &Tensor{Data: DevicePtr(b.Address()), Dtype: dtype, Shape: shape}
}

// stage uploads rank's inputs of step and clears every output.
func (b *llBuffers) stage(c llCase, step, rank int) error {
	return stageStep(c, step, rank, b.topkIdx, b.x, b.weights, b.outX, b.outCounts, b.expertOut, b.out)
}

// stageStep clears outputs and uploads rank's routing, tokens and weights of step, so that
// nothing left from an earlier step can pass a check.
func stageStep(c llCase, step, rank int, topkIdx, x, weights *cudadrv.Buffer, outputs ...*cudadrv.Buffer) error {
	for _, out := range outputs {
		if err := out.Clear(); err != nil {
			return err
		}
	}
	if err := cudadrv.Upload(topkIdx, c.topkIdx(step, rank)); err != nil {
		return err
	}
	if err := cudadrv.Upload(x, c.x(step, rank)); err != nil {
		return err
	}
	return cudadrv.Upload(weights, c.topkWeights(step, rank))
}

// refused checks that err has status and a message containing words.
func refused(what string, err error, status Status, words string) error {
	var e *Error
	if errors.As(err, &e) && e.Status == status && strings.Contains(e.Message, words) {
		return nil
	}
	return fmt.Errorf("%s: got %v, want %v saying %q", what, err, status, words)
}

// llStep runs one step on h, whose routing is already step's: dispatch (bounded by bound, 0
// for none), check, combine, check. accWant is the per-expert count accumulated so far, this
// step's added.
func llStep(c llCase, b *llBuffers, h *Handle, step, rank int, flags, bound uint32, accWant []int64) error {
	tokens, hidden := int64(c.tokens(step, rank)), int64(c.hidden)
	l, rows := int64(c.expertsPerRank), int64(c.rowsPerExpert())
	dispatch := &DispatchArgs{Flags: flags, X: tensorOn(b.x, DtypeBF16, tokens, hidden),
		TopKWeights: tensorOn(b.weights, DtypeFP32, tokens, int64(c.topk)), OutX: tensorOn(b.outX, DtypeBF16, l, rows, hidden),
		OutExpertCounts: tensorOn(b.outCounts, DtypeInt32, l), AccExpertCounts: tensorOn(b.accCounts, DtypeInt64, l),
		MaxStepTokens: bound}
	if err := h.Dispatch(dispatch, 0); err != nil {
		return fmt.Errorf("Dispatch: %w", err)
	}
	if flags&StepSendOnly != 0 {
		info, err := h.Query()
		if err != nil || info.Pending != PendingDispatch {
			return fmt.Errorf("Query after a send-only dispatch: %+v, %v; want Pending %d", info, err, PendingDispatch)
		}
		// One pending step per handle.
		if err := refused("a second dispatch before Complete", h.Dispatch(dispatch, 0), ErrInvalidUsage, ""); err != nil {
			return err
		}
		if err := h.Complete(0); err != nil {
			return fmt.Errorf("Complete (dispatch): %w", err)
		}
	}
	wantCounts, wantRows := c.dispatch(step, rank)
	counts, err := cudadrv.Download[int32](b.outCounts, c.expertsPerRank)
	if err != nil {
		return err
	}
	if fmt.Sprint(counts) != fmt.Sprint(wantCounts) {
		return fmt.Errorf("step %d: counts %v, expected %v", step, counts, wantCounts)
	}
	for e, count := range wantCounts {
		accWant[e] += int64(count)
	}
	acc, err := cudadrv.Download[int64](b.accCounts, c.expertsPerRank)
	if err != nil {
		return err
	}
	if fmt.Sprint(acc) != fmt.Sprint(accWant) {
		return fmt.Errorf("step %d: accumulated counts %v, expected %v", step, acc, accWant)
	}
	received, err := cudadrv.Download[uint16](b.outX, len(wantRows))
	if err != nil {
		return err
	}
	for e, count := range counts {
		start := e * c.rowsPerExpert() * c.hidden
		end := start + int(count)*c.hidden
		what := fmt.Sprintf("step %d: local expert %d", step, e)
		if problem := firstDifference(what, received[start:end], wantRows[start:end], c.hidden); problem != "" {
			return errors.New(problem)
		}
	}

	if err := cudadrv.Upload(b.expertOut, c.expertOutput(rank, received, counts)); err != nil {
		return err
	}
	combine := &CombineArgs{Flags: flags, X: tensorOn(b.expertOut, DtypeBF16, l, rows, hidden),
		Out: tensorOn(b.out, DtypeBF16, tokens, hidden)}
	if err := h.Combine(combine, 0); err != nil {
		return fmt.Errorf("Combine: %w", err)
	}
	if flags&StepSendOnly != 0 {
		if err := h.Complete(0); err != nil {
			return fmt.Errorf("Complete (combine): %w", err)
		}
	}
	got, err := cudadrv.Download[uint16](b.out, int(tokens)*c.hidden)
	if err != nil {
		return err
	}
	if problem := firstDifference(fmt.Sprintf("step %d: combined token", step), got, c.combine(step, rank), c.hidden); problem != "" {
		return errors.New(problem)
	}
	return nil
}

// llLocalErrors: errors the library finds on a live group before any communication, and one
// dispatch without weights that it serves. Every rank makes the same calls, so no rank waits
// for another. h holds step's routing.
func llLocalErrors(c llCase, b *llBuffers, group *Group, h *Handle, step, rank int) error {
	_, err := CreateHandle(group, nil, routing(tensorOn(b.topkIdx, DtypeInt64, 1, 4, 2)), 0)
	checks := []error{refused("a 3-D topk_idx", err, ErrInvalidArgument, "topk_idx")}
	_, err = CreateHandle(group, nil, routing(tensorOn(b.topkIdx, DtypeInt64, 4, llMaxTopK+1)), 0)
	checks = append(checks, refused("K above max_topk", err, ErrInvalidArgument, "max_topk"))
	_, err = CreateHandle(group, &HandleConfig{Layout: LayoutExpertPacked}, nil, 0)
	checks = append(checks, refused("an expert-packed layout on a low-latency group", err, ErrUnsupported, "layout"))
	_, err = CreateHandle(group, &HandleConfig{Sizing: SizingExact}, nil, 0)
	checks = append(checks, refused("exact sizing of an expert-padded layout", err, ErrInvalidArgument, "sizing"))
	checks = append(checks, refused("an fp32 topk_idx", h.Update(routing(tensorOn(b.topkIdx, DtypeFP32, 4, 2)), 0),
		ErrInvalidArgument, "topk_idx"))
	checks = append(checks, refused("Update without routing", h.Update(nil, 0), ErrInvalidArgument, ""))
	checks = append(checks, refused("Complete with nothing pending", h.Complete(0), ErrInvalidUsage, ""))
	tokens, hidden := int64(c.tokens(step, rank)), int64(c.hidden)
	l, rows := int64(c.expertsPerRank), int64(c.rowsPerExpert())
	x, weights := tensorOn(b.x, DtypeBF16, tokens, hidden), tensorOn(b.weights, DtypeFP32, tokens, int64(c.topk))
	err = h.Dispatch(&DispatchArgs{X: x, TopKWeights: weights, OutX: tensorOn(b.outX, DtypeBF16, l, rows, hidden/2)}, 0)
	checks = append(checks, refused("dispatch into a narrow out_x", err, ErrInvalidArgument, "out_x"))
	checks = append(checks, refused("dispatch without args", h.Dispatch(nil, 0), ErrInvalidArgument, ""))
	err = h.Dispatch(&DispatchArgs{Quant: QuantNVFP4, X: x, TopKWeights: weights, OutX: tensorOn(b.outX, DtypeBF16, l, rows, hidden)}, 0)
	checks = append(checks, refused("NVFP4", err, ErrUnsupported, ""))
	err = h.Combine(&CombineArgs{X: tensorOn(b.expertOut, DtypeBF16, l, rows, hidden), Out: tensorOn(b.out, DtypeBF16, tokens-1, hidden)}, 0)
	checks = append(checks, refused("combine into too few tokens", err, ErrInvalidArgument, "out"))
	// Weights at combine only: a dispatch without weights is served (every rank makes it), and
	// its default, sender-weighted combine is refused naming the weighting.
	if err = h.Dispatch(&DispatchArgs{X: x, OutX: tensorOn(b.outX, DtypeBF16, l, rows, hidden)}, 0); err != nil {
		checks = append(checks, fmt.Errorf("dispatch without weights: %w", err))
	}
	err = h.Combine(&CombineArgs{X: tensorOn(b.expertOut, DtypeBF16, l, rows, hidden), Out: tensorOn(b.out, DtypeBF16, tokens, hidden)}, 0)
	checks = append(checks, refused("a sender-weighted combine of a dispatch without weights", err, ErrInvalidArgument, "weighting"))

	// A handle without routing allocates locally and refuses steps until routed.
	unrouted, err := CreateHandle(group, &HandleConfig{Layout: LayoutExpertPadded}, nil, 0)
	if err != nil {
		return fmt.Errorf("CreateHandle without routing: %w", err)
	}
	defer unrouted.Close()
	info, err := unrouted.Query()
	if err != nil || info.Mode != ModeLowLatency || info.Layout != LayoutExpertPadded || info.NumTokens != 0 ||
		info.Capacity != uint64(rows) || info.Pending != PendingNone || info.OverflowRank != -1 {
		checks = append(checks, fmt.Errorf("Query of an unrouted handle: %+v, %v", info, err))
	}
	err = unrouted.Dispatch(&DispatchArgs{X: x, TopKWeights: weights, OutX: tensorOn(b.outX, DtypeBF16, l, rows, hidden)}, 0)
	checks = append(checks, refused("dispatch before routing", err, ErrInvalidUsage, ""))
	return joinProblems(checks)
}

// joinProblems is nil when every check passed, else one error naming each failed check.
func joinProblems(checks []error) error {
	var problems []string
	for _, check := range checks {
		if check != nil {
			problems = append(problems, check.Error())
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// llOnGroup runs body on rank's LL group of c and on its buffers (the accumulated counts
// zeroed, as a caller does once), which it makes first and closes and frees after. The caller
// holds runtime.LockOSThread.
func llOnGroup(id UniqueID, c llCase, rank int, body func(group *Group, b *llBuffers) error) (err error) {
	comm, err := InitComm(id, c.nranks, rank, rank)
	if err != nil {
		return fmt.Errorf("InitComm: %w", err)
	}
	defer func() {
		if closeErr := comm.Close(); err == nil && closeErr != nil {
			err = fmt.Errorf("Comm.Close: %w", closeErr)
		}
	}()
	if err := cudadrv.UseDevice(rank); err != nil {
		return err
	}
	cfg := GroupConfig{NumExperts: uint32(c.experts()), Hidden: uint32(c.hidden),
		MaxTokensPerRank: uint32(c.maxTokens), MaxTopK: llMaxTopK, Timeout: 20 * time.Second}
	group, err := NewGroup(comm, cfg)
	if err != nil {
		return fmt.Errorf("NewGroup: %w", err)
	}
	defer group.Close() // after a failure in body; a no-op after body's own Close
	b, err := newLLBuffers(c)
	if err != nil {
		return err
	}
	defer func() {
		for _, buffer := range b.all() {
			buffer.Free()
		}
	}()
	if err := b.accCounts.Clear(); err != nil {
		return err
	}
	return body(group, b)
}

// llRank is one rank's whole life. The caller holds runtime.LockOSThread.
func llRank(id UniqueID, c llCase, rank int) error {
	return llOnGroup(id, c, rank, func(group *Group, b *llBuffers) error { return llRankSteps(c, group, b, rank) })
}

// llRankSteps is llRank's life on its group: two steps, the local errors, the closes.
func llRankSteps(c llCase, group *Group, b *llBuffers, rank int) error {
	if err := b.stage(c, 0, rank); err != nil {
		return err
	}
	h, err := CreateHandle(group, nil, routing(tensorOn(b.topkIdx, DtypeInt64, int64(c.tokens(0, rank)), int64(c.topk))), 0)
	if err != nil {
		return fmt.Errorf("CreateHandle: %w", err)
	}
	defer h.Close()
	accWant := make([]int64, c.expertsPerRank)
	if err := llStep(c, b, h, 0, rank, 0, 0, accWant); err != nil {
		return err
	}
	if err := b.stage(c, 1, rank); err != nil {
		return err
	}
	if err := h.Update(routing(tensorOn(b.topkIdx, DtypeInt64, int64(c.tokens(1, rank)), int64(c.topk))), 0); err != nil {
		return fmt.Errorf("Update: %w", err)
	}
	if err := llStep(c, b, h, 1, rank, StepSendOnly, 0, accWant); err != nil {
		return err
	}
	if err := llLocalErrors(c, b, group, h, 1, rank); err != nil {
		return err
	}
	if err := refused("Group.Close with an open handle", group.Close(), ErrInvalidUsage, "still open"); err != nil {
		return err
	}
	if err := h.Close(); err != nil {
		return fmt.Errorf("Handle.Close: %w", err)
	}
	if err := refused("Complete after Close", h.Complete(0), ErrInvalidArgument, "closed"); err != nil {
		return err
	}
	if err := group.Close(); err != nil {
		return fmt.Errorf("Group.Close: %w", err)
	}
	return nil
}

// llBoundedRank: ABI 2.2's step bound on a group of T 24, whose steps here have 5 to 7
// tokens. Steps 0 and 3 pass none (records behind each rank's signal), steps 1 and 2 the most
// tokens any rank has in the step, alike on every rank (on one node, line records), step 2 as
// send-only + Complete; each matches the host model. A bound below this rank's tokens, or
// above T, is refused by name. The caller holds runtime.LockOSThread.
func llBoundedRank(id UniqueID, c llCase, rank int) error {
	return llOnGroup(id, c, rank, func(group *Group, b *llBuffers) error { return llBoundedSteps(c, group, b, rank) })
}

func llBoundedSteps(c llCase, group *Group, b *llBuffers, rank int) error {
	h, err := CreateHandle(group, nil, nil, 0)
	if err != nil {
		return fmt.Errorf("CreateHandle: %w", err)
	}
	defer h.Close()
	accWant := make([]int64, c.expertsPerRank)
	for step := 0; step < 4; step++ {
		bound, flags := uint32(0), uint32(0)
		if step == 1 || step == 2 {
			for q := 0; q < c.nranks; q++ {
				if tokens := uint32(c.tokens(step, q)); tokens > bound {
					bound = tokens
				}
			}
		}
		if step == 2 {
			flags = StepSendOnly
		}
		if err := b.stage(c, step, rank); err != nil {
			return err
		}
		if err := h.Update(routing(tensorOn(b.topkIdx, DtypeInt64, int64(c.tokens(step, rank)), int64(c.topk))), 0); err != nil {
			return fmt.Errorf("Update: %w", err)
		}
		if err := llStep(c, b, h, step, rank, flags, bound, accWant); err != nil {
			return fmt.Errorf("step %d (bound %d): %w", step, bound, err)
		}
	}
	tokens, hidden := int64(c.tokens(3, rank)), int64(c.hidden)
	var checks []error
	for _, bound := range []uint32{uint32(tokens) - 1, uint32(c.maxTokens) + 1} {
		err := h.Dispatch(&DispatchArgs{X: tensorOn(b.x, DtypeBF16, tokens, hidden),
			TopKWeights:   tensorOn(b.weights, DtypeFP32, tokens, int64(c.topk)),
			OutX:          tensorOn(b.outX, DtypeBF16, int64(c.expertsPerRank), int64(c.rowsPerExpert()), hidden),
			MaxStepTokens: bound}, 0)
		checks = append(checks, refused(fmt.Sprintf("a step bound of %d", bound), err, ErrInvalidArgument,
			fmt.Sprintf("max_step_tokens is %d", bound)))
	}
	if err := joinProblems(checks); err != nil {
		return err
	}
	if err := h.Close(); err != nil {
		return fmt.Errorf("Handle.Close: %w", err)
	}
	return group.Close()
}

// llCaseOf is the LL tests' case on n ranks, groups of maxTokens tokens per rank.
func llCaseOf(maxTokens int) func(n int) llCase {
	return func(n int) llCase {
		return llCase{nranks: n, expertsPerRank: 4, hidden: 2048, topk: 2, maxTokens: maxTokens}
	}
}

func TestLLBoundedStepsOnGPUs(t *testing.T) {
	runCaseOnGPUs(t, "LL", llCaseOf(24), llBoundedRank, "4 LL steps, 2 of them bounded, matched the host model")
}

func TestLLDispatchCombineOnGPUs(t *testing.T) {
	runCaseOnGPUs(t, "LL", llCaseOf(8), llRank, "2 steps of LL dispatch + combine matched the host model")
}
