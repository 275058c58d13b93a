// SPDX-License-Identifier: Apache-2.0

// Package epcomm is the Go binding of libepcomm, expert-parallel (Mixture-of-Experts)
// communication on NCCL's Device API. It wraps the C ABI of <epcomm/epcomm.h> with cgo and
// links libepcomm.so.2 (ABI major 2, at least 2.3), found through pkg-config (epcomm.pc; set
// PKG_CONFIG_PATH for an install outside the default paths). With the build tag
// epcomm_nopkgconfig it links -lepcomm and takes the header's and the library's directories
// from CGO_CFLAGS and CGO_LDFLAGS instead.
//
// # Collective calls
//
// As in the C header, every function's comment says whether it is collective (every rank of
// the communicator must call it, in the same order) or local, and whether it blocks.
// InitComm, InitCommTimeout, NewGroup, Group.Barrier, Group.Close and Comm.Close are
// collective and blocking; Handle.Dispatch, Handle.Combine and Handle.Complete are
// collective and stream-ordered (they return once the work is queued on the CUDA stream), as
// are CreateHandle with a routing and Handle.Update on a high-throughput group.
//
// # The thread rule
//
// Two pieces of C state belong to an OS thread, not to a goroutine: the CUDA device that
// is current, and epcomm's last-error message. The package keeps the message right by
// itself: each C call and the fetch of its message run on one locked OS thread, so the
// message in an *Error always belongs to that call. The device is the caller's business:
// InitComm makes the rank's device current on the calling thread and NewGroup requires it
// there, so a goroutine that drives a rank must call runtime.LockOSThread before InitComm
// (or before NewGroup on an adopted communicator) and keep the lock while it uses the rank.
// Run one goroutine per rank: collective calls block until every rank has joined.
//
// # No finalizers
//
// Handles, groups and communicators are released only by their explicit Close. Destroying
// a group or a communicator is collective (every rank must call it, in the same order,
// because NCCL window deregistration and communicator teardown are collective) and
// blocking, and it must run with the rank's CUDA device; destroying a handle waits for the
// GPU work queued on it and must happen before its group's. A finalizer runs at a time the
// garbage collector picks, differently on every rank, on the one finalizer goroutine and on
// whatever thread that happens to use, or never: it would deadlock the ranks or hang every
// other finalizer in the process. Call Close, typically with defer, on every rank.
//
// # Errors
//
// A failed call returns an *Error carrying the Status and the library's detail message.
// Status values are errors themselves, so errors.Is(err, epcomm.ErrInvalidUsage) tests
// the status of any error this package returns. Status codes the bindings do not know (a
// newer library) are kept as they are. The rule: ErrInvalidArgument for a NULL required
// field, a wrong shape or dtype or a field meaningless for the mode or layout;
// ErrUnsupported for a field the ABI defines that this library does not serve yet;
// ErrInvalidUsage for calls out of order (Complete with nothing pending, a second pending
// step, a step before any routing); ErrCapacity when a step received more rows than the
// handle holds. A failing call changes nothing.
//
// # Device memory and streams
//
// Tensor describes memory by address: DevicePtr and Stream are integer types (uintptr),
// the form CUDA bindings hand out, so user code never converts an integer into an
// unsafe.Pointer and `go vet` stays quiet; 0 is the legacy default stream. The package
// never allocates device memory.
//
// # Dispatch and combine
//
// One Handle type serves both modes; its mode is its Group's. CreateHandle (with a
// HandleConfig for the layout and sizing, nil for defaults, and optionally a Routing)
// creates it; Update gives it the next step's routing; Dispatch sends the tokens to their
// experts' ranks and Combine brings the expert outputs back, each taking its fields in a
// struct (DispatchArgs, CombineArgs) whose *Tensor fields are nil when absent. With
// StepSendOnly in the args' Flags a call queues only its sending half and Complete
// finishes it. Query describes the handle (its Rows, what is pending). Close handles
// before their group.
package epcomm
