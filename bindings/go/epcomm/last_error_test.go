// SPDX-License-Identifier: Apache-2.0
package epcomm

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestLastErrorMessageComesWithTheFailure(t *testing.T) {
	_, err := PlanQuery(GroupConfig{NumExperts: 64, Hidden: 2048}, 3, 3, 1)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("64 experts on 3 ranks: got %v, want an *Error", err)
	}
	if e.Status != ErrInvalidArgument || !strings.Contains(e.Message, "divisible") {
		t.Errorf("got status %v, message %q", e.Status, e.Message)
	}
	// A later success clears the thread's message; the *Error keeps its copy.
	if _, err := Version(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.Message, "divisible") {
		t.Errorf("message changed after another call: %q", e.Message)
	}
}

// Many goroutines fail in different ways at once; each error must carry its own call's
// message, which holds only if the call and the message fetch share one OS thread.
func TestLastErrorMessagesStayWithTheirCalls(t *testing.T) {
	cases := []struct {
		cfg    GroupConfig
		nranks int
		word   string
	}{
		{GroupConfig{NumExperts: 64, Hidden: 0}, 4, "hidden"},
		{GroupConfig{NumExperts: 64, Hidden: 2048}, 3, "divisible"},
		{GroupConfig{NumExperts: 64, Hidden: 2048}, 0, "nranks"},
	}
	var wg sync.WaitGroup
	failures := make(chan string, 64)
	for worker := 0; worker < 24; worker++ {
		wg.Add(1)
		go func(worker int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				c := cases[(worker+i)%len(cases)]
				_, err := PlanQuery(c.cfg, c.nranks, c.nranks, 1)
				var e *Error
				if !errors.As(err, &e) || !strings.Contains(e.Message, c.word) {
					select {
					case failures <- c.word + ": " + errString(err):
					default:
					}
					return
				}
			}
		}(worker)
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
