// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import (
	"sync"
	"time"
	"unsafe"
)

// Comm is one rank's NCCL communicator (an ncclComm_t): created by InitComm (or
// InitCommTimeout) and owned, or
// adopted from another NCCL binding with AdoptComm and only borrowed. Groups are built on
// it with NewGroup. Its methods are not safe for concurrent use with each other.
type Comm struct {
	mu         sync.Mutex
	handle     unsafe.Pointer // ncclComm_t; nil once closed
	owned      bool
	closed     bool
	openGroups int
}

// InitComm creates this rank's communicator (epc_comm_init) on CUDA device `device` and
// makes that device current on the calling OS thread (a negative device keeps the current
// one). Collective over all nranks ranks and blocking: every rank calls it at the same time,
// one goroutine per rank, each locked to its OS thread (runtime.LockOSThread) because
// NewGroup needs the device current on the same thread. It waits without a bound for every
// rank to join; InitCommTimeout bounds the wait. Close the Comm after every Group built on it.
func InitComm(id UniqueID, nranks, rank, device int) (*Comm, error) {
	return initComm(id, nranks, rank, device, nil)
}

// InitCommTimeout is InitComm within a bound (epc_comm_init_config, ABI 2.3): when not every
// rank has joined after `timeout` (rounded up to whole milliseconds; a rank died, or was
// given another id), it fails with ErrTimeout naming this rank, and what NCCL made of the
// communicator is aborted (there is nothing to close). The communicator is then in NCCL's
// non-blocking mode, so that NewGroup bounds its NCCL steps by the group's Timeout too (NCCL
// calls of your own on Handle() return ncclInProgress: see NCCL's docs), and Close waits at
// most `timeout` for NCCL to finalize it, then aborts it. A timeout of 0 waits without a
// bound, as InitComm does. Collective and blocking like InitComm.
func InitCommTimeout(id UniqueID, nranks, rank, device int, timeout time.Duration) (*Comm, error) {
	ms, err := timeoutMilliseconds("timeout", timeout)
	if err != nil {
		return nil, err
	}
	var cfg C.EpcCommConfig
	cfg.struct_size = C.uint32_t(unsafe.Sizeof(cfg))
	cfg.abi_version = C.uint32_t(ABIVersion)
	cfg.timeout_ms = C.uint32_t(ms)
	return initComm(id, nranks, rank, device, &cfg)
}

// initComm is epc_comm_init, or epc_comm_init_config with cfg when it is not nil.
func initComm(id UniqueID, nranks, rank, device int, cfg *C.EpcCommConfig) (*Comm, error) {
	cNranks, err := int32Arg("nranks", nranks)
	if err != nil {
		return nil, err
	}
	cRank, err := int32Arg("rank", rank)
	if err != nil {
		return nil, err
	}
	cDevice, err := int32Arg("device", device)
	if err != nil {
		return nil, err
	}
	cID := id.toC()
	var handle unsafe.Pointer
	err = call(func() C.EpcStatus {
		if cfg == nil {
			return C.epc_comm_init(&cID, cNranks, cRank, cDevice, &handle)
		}
		return C.epc_comm_init_config(&cID, cNranks, cRank, cDevice, cfg, &handle)
	})
	if err != nil {
		return nil, err
	}
	return &Comm{handle: handle, owned: true}, nil
}

// AdoptComm wraps an existing ncclComm_t that another binding created. The Comm borrows
// it: Close does not destroy it, and the communicator must outlive every Group built on
// it. Local; nil gives a Comm that every call rejects as NULL.
func AdoptComm(ncclComm unsafe.Pointer) *Comm {
	return &Comm{handle: ncclComm}
}

// Handle returns the ncclComm_t for other NCCL bindings (nil once the Comm is closed);
// whoever owned it still does.
func (c *Comm) Handle() unsafe.Pointer {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handle
}

// Close destroys a communicator InitComm or InitCommTimeout created (epc_comm_destroy; for
// InitCommTimeout's, NCCL's finalize is bounded by its timeout, then aborted) and forgets an
// adopted one without destroying it. It fails with ErrInvalidUsage, changing nothing, while
// a Group built on the Comm is open. Collective and blocking for a created communicator (every rank closes its
// own), local for an adopted one. Calling it again returns nil.
func (c *Comm) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if c.openGroups > 0 {
		return usageError("%d group(s) built on this Comm are still open: Close them first "+
			"(group destruction uses the communicator)", c.openGroups)
	}
	handle := c.handle
	c.handle = nil // destroyed or not, the communicator cannot be used again
	c.closed = true
	if !c.owned || handle == nil {
		return nil
	}
	return call(func() C.EpcStatus { return C.epc_comm_destroy(handle) })
}
