// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// gpusUnderTest reads EPCOMM_TEST_GPUS; without it the GPU tests skip.
func gpusUnderTest(t *testing.T) int {
	text := os.Getenv("EPCOMM_TEST_GPUS")
	if text == "" {
		t.Skip("GPU test: set EPCOMM_TEST_GPUS=N (N >= 1) to run it on N local GPUs")
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 1 {
		t.Fatalf("EPCOMM_TEST_GPUS=%q: want a GPU count >= 1", text)
	}
	return n
}

// twoOrMoreGPUs skips the test (named by what) unless EPCOMM_TEST_GPUS asks for at least 2
// GPUs, and returns their number and a unique id for the ranks' communicator.
func twoOrMoreGPUs(t *testing.T, what string) (int, UniqueID) {
	t.Helper()
	n := gpusUnderTest(t)
	if n < 2 {
		t.Skipf("GPU %s test: needs EPCOMM_TEST_GPUS >= 2, got %d", what, n)
	}
	id, err := NewUniqueID()
	if err != nil {
		t.Fatalf("NewUniqueID: %v", err)
	}
	return n, id
}

// runRanksOnGPUs runs rankMain(rank) for n ranks, one goroutine per rank locked to its OS
// thread (the thread rule), and reports each rank's error; all must finish in 5 minutes.
func runRanksOnGPUs(t *testing.T, n int, rankMain func(rank int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for rank := 0; rank < n; rank++ {
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			errs[rank] = rankMain(rank)
		}(rank)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("the ranks did not finish within 5 minutes")
	}
	for rank, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
		}
	}
}

// runCaseOnGPUs runs rankMain(id, c, rank) on every rank of the case `of` gives for n >= 2
// GPUs (skipped with fewer: `what` names the test) and logs "<passed> on n GPUs" when every
// rank passed.
func runCaseOnGPUs(t *testing.T, what string, of func(n int) llCase, rankMain func(UniqueID, llCase, int) error,
	passed string) {
	t.Helper()
	n, id := twoOrMoreGPUs(t, what)
	c := of(n)
	runRanksOnGPUs(t, n, func(rank int) error { return rankMain(id, c, rank) })
	if !t.Failed() {
		t.Logf("%s on %d GPUs", passed, n)
	}
}

// One goroutine per GPU, each locked to its OS thread (the thread rule): bootstrap a
// communicator, build a group, query it, cross the barrier, close everything.
func TestGroupLifecycleOnGPUs(t *testing.T) {
	groupLifecycleOnGPUs(t, InitComm)
}

// The same on communicators made within a bound (ABI 2.3), in NCCL's non-blocking mode.
func TestGroupLifecycleOnCommsMadeWithATimeout(t *testing.T) {
	groupLifecycleOnGPUs(t, func(id UniqueID, nranks, rank, device int) (*Comm, error) {
		return InitCommTimeout(id, nranks, rank, device, 30*time.Second)
	})
}

// Rank 0 of a two-rank communicator whose rank 1 never comes (nobody else has the id):
// ErrTimeout after about its 1 s instead of a wait for good, and no Comm.
func TestACommWhoseSecondRankNeverComesTimesOut(t *testing.T) {
	gpusUnderTest(t)
	id, err := NewUniqueID()
	if err != nil {
		t.Fatalf("NewUniqueID: %v", err)
	}
	runRanksOnGPUs(t, 1, func(int) error {
		start := time.Now()
		comm, err := InitCommTimeout(id, 2, 0, 0, time.Second)
		elapsed := time.Since(start)
		if comm != nil || !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "within 1000 ms") {
			return fmt.Errorf("InitCommTimeout: got %v, %v; want ErrTimeout saying \"within 1000 ms\"", comm, err)
		}
		if elapsed < 950*time.Millisecond || elapsed >= 5*time.Second {
			return fmt.Errorf("ErrTimeout after %v; want 1 to 5 s", elapsed)
		}
		t.Logf("ErrTimeout after %v: %v", elapsed, err)
		return nil
	})
}

// groupLifecycleOnGPUs runs runRank on every GPU, with communicators from newComm.
func groupLifecycleOnGPUs(t *testing.T, newComm func(id UniqueID, nranks, rank, device int) (*Comm, error)) {
	t.Helper()
	n := gpusUnderTest(t)
	id, err := NewUniqueID()
	if err != nil {
		t.Fatalf("NewUniqueID: %v", err)
	}
	cfg := GroupConfig{NumExperts: uint32(8 * n), Hidden: 2048}
	infos := make([]GroupInfo, n)
	runRanksOnGPUs(t, n, func(rank int) (err error) {
		infos[rank], err = runRank(newComm, id, n, rank, cfg)
		return err
	})
	if t.Failed() {
		return
	}
	for rank, info := range infos {
		t.Logf("rank %d: %+v", rank, info)
		if info.Rank != rank || info.NRanks != n || info.CUDADevice != rank || info.NumExperts != uint32(8*n) ||
			info.LocalExperts != 8 || info.Hidden != 2048 || info.Mode != ModeLowLatency ||
			info.Timeout != 10*time.Second || info.SymmetricBytes == 0 {
			t.Errorf("rank %d: unexpected info %+v", rank, info)
			continue
		}
		plan, err := PlanQuery(cfg, n, info.LSASize, info.NumNodes)
		if err != nil || plan.SymmetricBytes != info.SymmetricBytes {
			t.Errorf("rank %d holds %d window bytes; the plan says %d (%v)", rank, info.SymmetricBytes, plan.SymmetricBytes, err)
		}
	}
}

// runRank is one rank's whole life, on a communicator from newComm. The caller holds
// runtime.LockOSThread.
func runRank(newComm func(id UniqueID, nranks, rank, device int) (*Comm, error), id UniqueID, n, rank int,
	cfg GroupConfig) (info GroupInfo, err error) {
	comm, err := newComm(id, n, rank, rank)
	if err != nil {
		return info, fmt.Errorf("InitComm: %w", err)
	}
	defer func() {
		if closeErr := comm.Close(); err == nil && closeErr != nil {
			err = fmt.Errorf("Comm.Close: %w", closeErr)
		}
	}()
	group, err := NewGroup(comm, cfg)
	if err != nil {
		return info, fmt.Errorf("NewGroup: %w", err)
	}
	defer group.Close() // after a failure below; a no-op after the Close at the end
	if info, err = group.Info(); err != nil {
		return info, fmt.Errorf("Info: %w", err)
	}
	if err = group.Barrier(0); err != nil {
		return info, fmt.Errorf("Barrier: %w", err)
	}
	if err = group.AsyncError(); err != nil { // a healthy group has nothing to report
		return info, fmt.Errorf("AsyncError: %w", err)
	}
	if err = comm.Close(); !errors.Is(err, ErrInvalidUsage) {
		return info, fmt.Errorf("Comm.Close with an open group: got %v, want ErrInvalidUsage", err)
	}
	if err = group.Close(); err != nil {
		return info, fmt.Errorf("Group.Close: %w", err)
	}
	if err = group.Close(); err != nil {
		return info, fmt.Errorf("second Group.Close: %w", err)
	}
	if _, err = group.Info(); !errors.Is(err, ErrInvalidArgument) {
		return info, fmt.Errorf("Info after Close: got %v, want ErrInvalidArgument", err)
	}
	if err = group.AsyncError(); !errors.Is(err, ErrInvalidArgument) {
		return info, fmt.Errorf("AsyncError after Close: got %v, want ErrInvalidArgument", err)
	}
	return info, nil
}
