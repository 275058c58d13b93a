// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"epcomm/internal/cudadrv"
)

// Low-latency dispatch and combine on real GPUs, one goroutine per GPU (each locked to its
// OS thread): every rank dispatches known tokens, checks what it received against the host
// model (ll_model_test.go), feeds a known function of the received rows to combine, and
// checks the combined tokens bit for bit. Step 0 runs each call whole; step 1 updates the
// routing and runs each call as send-only + Complete. Local errors that need a live group
// (tensor shapes, Complete with nothing pending, a dispatch while one is pending) are
// checked too. Runs with EPCOMM_TEST_GPUS=N, N >= 2; device memory comes from the CUDA
// driver, loaded at run time (internal/cudadrv).

const llMaxTopK = 4

// llBuffers is one rank's device memory, sized for the largest step.
type llBuffers struct {
	topkIdx, x, weights, outX, outCounts, expertOut, out *cudadrv.Buffer
}

func newLLBuffers(c llCase) (*llBuffers, error) {
	expertRows := c.expertsPerRank * c.rowsPerExpert() * c.hidden * 2
	sizes := []int{c.maxTokens * (llMaxTopK + 1) * 8, c.maxTokens * c.hidden * 2, c.maxTokens * (llMaxTopK + 1) * 4,
		expertRows, c.expertsPerRank * 4, expertRows, c.maxTokens * c.hidden * 2}
	buffers := make([]*cudadrv.Buffer, len(sizes))
	for i, size := range sizes {
		b, err := cudadrv.Alloc(size)
		if err != nil {
			return nil, err
		}
		buffers[i] = b
	}
	return &llBuffers{buffers[0], buffers[1], buffers[2], buffers[3], buffers[4], buffers[5], buffers[6]}, nil
}

func (b *llBuffers) all() []*cudadrv.Buffer {
	return []*cudadrv.Buffer{b.topkIdx, b.x, b.weights, b.outX, b.outCounts, b.expertOut, b.out}
}

func tensorOn(b *cudadrv.Buffer, dtype Dtype, shape ...int64) Tensor {
	return Tensor{Data: b.Pointer(), Dtype: dtype, Shape: shape}
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

// llStep runs one step on h, whose routing is already step's: dispatch, check, combine, check.
func llStep(c llCase, b *llBuffers, h *Handle, step, rank int, flags Flags) error {
	tokens, hidden := int64(c.tokens(step, rank)), int64(c.hidden)
	l, rows := int64(c.expertsPerRank), int64(c.rowsPerExpert())
	x := tensorOn(b.x, DtypeBF16, tokens, hidden)
	weights := tensorOn(b.weights, DtypeFP32, tokens, int64(c.topk))
	outX := tensorOn(b.outX, DtypeBF16, l, rows, hidden)
	outCounts := tensorOn(b.outCounts, DtypeInt32, l)
	if err := h.LLDispatch(x, weights, outX, outCounts, flags, nil); err != nil {
		return fmt.Errorf("LLDispatch: %w", err)
	}
	if flags&FlagSendOnly != 0 {
		// Nothing else of the group may start before the pending step completes.
		if err := refused("a second dispatch before Complete", h.LLDispatch(x, weights, outX, outCounts, FlagNone, nil),
			ErrInvalidArgument, "epc_complete first"); err != nil {
			return err
		}
		if err := h.Complete(nil); err != nil {
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
	expertOut := tensorOn(b.expertOut, DtypeBF16, l, rows, hidden)
	out := tensorOn(b.out, DtypeBF16, tokens, hidden)
	if err := h.LLCombine(expertOut, out, flags, nil); err != nil {
		return fmt.Errorf("LLCombine: %w", err)
	}
	if flags&FlagSendOnly != 0 {
		if err := h.Complete(nil); err != nil {
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

// llLocalErrors: errors the library finds on a live group before any communication. Every
// rank makes the same calls, so no rank waits for another. h holds step's routing.
func llLocalErrors(c llCase, b *llBuffers, group *Group, h *Handle, step, rank int) error {
	_, err := NewHandle(group, tensorOn(b.topkIdx, DtypeInt64, 1, 4, 2), nil)
	checks := []error{refused("a 3-D topk_idx", err, ErrInvalidArgument, "3 dimensions")}
	_, err = NewHandle(group, tensorOn(b.topkIdx, DtypeInt64, 4, llMaxTopK+1), nil)
	checks = append(checks, refused("K above max_topk", err, ErrInvalidArgument, "max_topk"))
	_, err = NewHTHandle(group, tensorOn(b.topkIdx, DtypeInt64, 4, 2), HTSizingExact, nil)
	checks = append(checks, refused("an HTHandle on a low-latency group", err, ErrInvalidArgument, "low-latency mode"))
	checks = append(checks, refused("an fp32 topk_idx", h.Update(tensorOn(b.topkIdx, DtypeFP32, 4, 2), nil),
		ErrInvalidArgument, "dtype"))
	checks = append(checks, refused("Complete with nothing pending", h.Complete(nil), ErrInvalidArgument, "nothing is pending"))
	tokens, hidden := int64(c.tokens(step, rank)), int64(c.hidden)
	l, rows := int64(c.expertsPerRank), int64(c.rowsPerExpert())
	err = h.LLDispatch(tensorOn(b.x, DtypeBF16, tokens, hidden), tensorOn(b.weights, DtypeFP32, tokens, int64(c.topk)),
		tensorOn(b.outX, DtypeBF16, l, rows, hidden/2), tensorOn(b.outCounts, DtypeInt32, l), FlagNone, nil)
	checks = append(checks, refused("dispatch into a narrow out_x", err, ErrInvalidArgument, "tensor out_x has shape"))
	err = h.LLCombine(tensorOn(b.expertOut, DtypeBF16, l, rows, hidden), tensorOn(b.out, DtypeBF16, tokens-1, hidden), FlagNone, nil)
	checks = append(checks, refused("combine into too few tokens", err, ErrInvalidArgument, "tensor out has shape"))
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

// llRank is one rank's whole life. The caller holds runtime.LockOSThread.
func llRank(id UniqueID, c llCase, rank int) (err error) {
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
	defer group.Close() // after a failure below; a no-op after the Close at the end
	b, err := newLLBuffers(c)
	if err != nil {
		return err
	}
	defer func() {
		for _, buffer := range b.all() {
			buffer.Free()
		}
	}()

	if err := b.stage(c, 0, rank); err != nil {
		return err
	}
	h, err := NewHandle(group, tensorOn(b.topkIdx, DtypeInt64, int64(c.tokens(0, rank)), int64(c.topk)), nil)
	if err != nil {
		return fmt.Errorf("NewHandle: %w", err)
	}
	defer h.Close()
	if err := llStep(c, b, h, 0, rank, FlagNone); err != nil {
		return err
	}
	if err := b.stage(c, 1, rank); err != nil {
		return err
	}
	if err := h.Update(tensorOn(b.topkIdx, DtypeInt64, int64(c.tokens(1, rank)), int64(c.topk)), nil); err != nil {
		return fmt.Errorf("Update: %w", err)
	}
	if err := llStep(c, b, h, 1, rank, FlagSendOnly); err != nil {
		return err
	}
	if err := llLocalErrors(c, b, group, h, 1, rank); err != nil {
		return err
	}
	if err := refused("Group.Close with an open handle", group.Close(), ErrInvalidArgument, "still open"); err != nil {
		return err
	}
	if err := h.Close(); err != nil {
		return fmt.Errorf("Handle.Close: %w", err)
	}
	if err := refused("Complete after Close", h.Complete(nil), ErrInvalidArgument, "closed"); err != nil {
		return err
	}
	if err := group.Close(); err != nil {
		return fmt.Errorf("Group.Close: %w", err)
	}
	return nil
}

func TestLLDispatchCombineOnGPUs(t *testing.T) {
	n, id := twoOrMoreGPUs(t, "LL")
	c := llCase{nranks: n, expertsPerRank: 4, hidden: 2048, topk: 2, maxTokens: 8}
	runRanksOnGPUs(t, n, func(rank int) error { return llRank(id, c, rank) })
	if !t.Failed() {
		t.Logf("2 steps of LL dispatch + combine matched the host model on %d GPUs", n)
	}
}
