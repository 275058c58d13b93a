package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import "unsafe"

// Handle is the routing of one batch on a low-latency Group (EpcHandle), and the device
// state a step needs: LLDispatch, LLCombine and Complete run on it, Update gives it the
// next step's routing. Create it with NewHandle and release it with Close before closing
// its Group. Its calls and the calls of its Group (except Info) wait for each other: the
// library keeps per-group step state that they update. That makes them safe from several
// goroutines, not meaningful: dispatch and combine are collective, so drive one group's
// steps from one goroutine, in the same order on every rank.
type Handle struct {
	handle *C.EpcHandle // nil once closed; read and written under group.mu
	group  *Group
}

// NewHandle creates a handle on group for the routing topkIdx (epc_handle_create): [B, K]
// int64 or int32 expert ids on the group's device, contiguous, -1 masking an entry;
// B <= MaxTokensPerRank, K <= MaxTopK. The routing is copied on stream (a cudaStream_t; nil
// = the legacy default stream), so topkIdx may be reused once that stream has passed this
// point. Allocates device memory. Local (no communication); stream-ordered; not
// graph-capturable.
func NewHandle(group *Group, topkIdx Tensor, stream unsafe.Pointer) (*Handle, error) {
	if group == nil {
		return nil, argumentError("NewHandle: the Group is nil")
	}
	idx, err := topkIdx.toC("topk_idx")
	if err != nil {
		return nil, err
	}
	group.mu.Lock()
	defer group.mu.Unlock()
	if group.handle == nil {
		return nil, errGroupClosed()
	}
	groupHandle := group.handle
	var handle *C.EpcHandle
	err = call(func() C.EpcStatus { return C.epc_handle_create(groupHandle, &idx, stream, &handle) })
	if err != nil {
		return nil, err
	}
	group.openHandles++
	return &Handle{handle: handle, group: group}, nil
}

// Update replaces the routing with topkIdx for the next step (epc_handle_update): same rules
// as NewHandle; B may change, K may not. Call it after the previous step's combine. No
// allocation and no host synchronisation (graph-capturable). Local; stream-ordered.
func (h *Handle) Update(topkIdx Tensor, stream unsafe.Pointer) error {
	idx, err := topkIdx.toC("topk_idx")
	if err != nil {
		return err
	}
	return h.run(func(handle *C.EpcHandle) C.EpcStatus { return C.epc_handle_update(handle, &idx, stream) })
}

// Close frees the handle's device memory once the work queued on it has finished
// (epc_handle_destroy). Local; blocking. The handle is gone afterwards even when Close
// reports an error, and calling Close again returns nil. Close every handle of a Group
// before the Group.
func (h *Handle) Close() error {
	if h == nil {
		return nil
	}
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

// run calls fn with the live C handle while holding the group's lock, or reports that the
// handle is closed without calling the library.
func (h *Handle) run(fn func(handle *C.EpcHandle) C.EpcStatus) error {
	if h == nil {
		return argumentError("the Handle is nil")
	}
	h.group.mu.Lock()
	defer h.group.mu.Unlock()
	if h.handle == nil {
		return argumentError("the Handle is closed")
	}
	handle := h.handle
	return call(func() C.EpcStatus { return fn(handle) })
}
