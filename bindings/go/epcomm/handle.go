// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import "unsafe"

// handleRef is what Handle and HTHandle share: the C handle (either mode) and the Group it
// was created on, whose lock every call on the handle holds.
type handleRef struct {
	handle *C.EpcHandle // nil once closed; read and written under group.mu
	group  *Group
}

// newHandleRef creates a C handle on group with create, under the group's lock. what names
// the Go function for the nil-group message.
func newHandleRef(what string, group *Group, create func(group *C.EpcGroup, out **C.EpcHandle) C.EpcStatus) (handleRef, error) {
	if group == nil {
		return handleRef{}, argumentError("%s: the Group is nil", what)
	}
	group.mu.Lock()
	defer group.mu.Unlock()
	if group.handle == nil {
		return handleRef{}, errGroupClosed()
	}
	groupHandle := group.handle
	var handle *C.EpcHandle
	if err := call(func() C.EpcStatus { return create(groupHandle, &handle) }); err != nil {
		return handleRef{}, err
	}
	group.openHandles++
	return handleRef{handle: handle, group: group}, nil
}

// run calls fn with the live C handle while holding the group's lock, or reports that the
// handle (a `kind`) is closed without calling the library.
func (h *handleRef) run(kind string, fn func(handle *C.EpcHandle) C.EpcStatus) error {
	h.group.mu.Lock()
	defer h.group.mu.Unlock()
	if h.handle == nil {
		return argumentError("the %s is closed", kind)
	}
	handle := h.handle
	return call(func() C.EpcStatus { return fn(handle) })
}

// update is epc_handle_update, which takes handles of both modes.
func (h *handleRef) update(kind string, topkIdx Tensor, stream unsafe.Pointer) error {
	idx, err := topkIdx.toC("topk_idx")
	if err != nil {
		return err
	}
	return h.run(kind, func(handle *C.EpcHandle) C.EpcStatus { return C.epc_handle_update(handle, &idx, stream) })
}

// close is epc_handle_destroy; the handle is forgotten whatever the library says.
func (h *handleRef) close() error {
	h.group.mu.Lock()
	defer h.group.mu.Unlock()
	if h.handle == nil {
		return nil
	}
	handle := h.handle
	h.handle = nil
	h.group.openHandles--
	return call(func() C.EpcStatus { return C.epc_handle_destroy(handle) })
}

// Handle is the routing of one batch on a low-latency Group (EpcHandle), and the device
// state a step needs: LLDispatch, LLCombine and Complete run on it, Update gives it the
// next step's routing. Create it with NewHandle and release it with Close before closing
// its Group. Its calls and the calls of its Group (except Info) wait for each other: the
// library keeps per-group step state that they update. That makes them safe from several
// goroutines, not meaningful: dispatch and combine are collective, so drive one group's
// steps from one goroutine, in the same order on every rank.
type Handle struct {
	handleRef
}

// NewHandle creates a handle on group for the routing topkIdx (epc_handle_create): [B, K]
// int64 or int32 expert ids on the group's device, contiguous, -1 masking an entry;
// B <= MaxTokensPerRank, K <= MaxTopK. The routing is copied on stream (a cudaStream_t; nil
// = the legacy default stream), so topkIdx may be reused once that stream has passed this
// point. Allocates device memory. A high-throughput group refuses it (its handles come from
// NewHTHandle). Local (no communication); stream-ordered; not graph-capturable.
func NewHandle(group *Group, topkIdx Tensor, stream unsafe.Pointer) (*Handle, error) {
	idx, err := topkIdx.toC("topk_idx")
	if err != nil {
		return nil, err
	}
	ref, err := newHandleRef("NewHandle", group, func(group *C.EpcGroup, out **C.EpcHandle) C.EpcStatus {
		return C.epc_handle_create(group, &idx, stream, out)
	})
	if err != nil {
		return nil, err
	}
	return &Handle{ref}, nil
}

// Update replaces the routing with topkIdx for the next step (epc_handle_update): same rules
// as NewHandle; B may change, K may not. Call it after the previous step's combine. No
// allocation and no host synchronisation (graph-capturable). Local; stream-ordered.
func (h *Handle) Update(topkIdx Tensor, stream unsafe.Pointer) error {
	if h == nil {
		return errNilHandle("Handle")
	}
	return h.update("Handle", topkIdx, stream)
}

// Close frees the handle's device memory once the work queued on it has finished
// (epc_handle_destroy). Local; blocking. The handle is gone afterwards even when Close
// reports an error, and calling Close again returns nil. Close every handle of a Group
// before the Group.
func (h *Handle) Close() error {
	if h == nil {
		return nil
	}
	return h.close()
}

// run calls fn with the live C handle under the group's lock (see handleRef.run).
func (h *Handle) run(fn func(handle *C.EpcHandle) C.EpcStatus) error {
	if h == nil {
		return errNilHandle("Handle")
	}
	return h.handleRef.run("Handle", fn)
}

func errNilHandle(kind string) error {
	return argumentError("the %s is nil", kind)
}
