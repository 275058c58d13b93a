// SPDX-License-Identifier: Apache-2.0

// Package epcomm is the Go binding of libepcomm, expert-parallel (Mixture-of-Experts)
// communication on NCCL's Device API. It wraps the C ABI of <epcomm/epcomm.h> with cgo and
// links -lepcomm (libepcomm.so.1); point CGO_CFLAGS at the header's directory and
// CGO_LDFLAGS at the library's.
//
// # Collective calls
//
// As in the C header, every function's comment says whether it is collective (every rank of
// the communicator must call it, in the same order) or local, and whether it blocks.
// InitComm, NewGroup, NewHTHandle, Group.Barrier, Group.Close and Comm.Close are
// collective and blocking; Handle.LLDispatch, Handle.LLDispatchFP8, Handle.LLCombine,
// Handle.Complete, HTHandle.Dispatch, HTHandle.Combine and HTHandle.Update are collective
// and stream-ordered (they return once the work is queued on the CUDA stream).
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
// Status values are errors themselves, so errors.Is(err, epcomm.ErrInvalidArgument)
// tests the status of any error this package returns. Status codes the bindings do not
// know (a newer library) are kept as they are.
//
// # Dispatch and combine
//
// NewHandle creates the routing of one batch on a low-latency group; LLDispatch sends the
// tokens to their experts' ranks (LLDispatchFP8 sends them as FP8 with per-128-channel
// scales), LLCombine brings the expert outputs back, and with FlagSendOnly each half is
// split in two, finished by Complete. Update gives the handle the next step's routing.
//
// NewHTHandle creates the routing and layout of one batch on a high-throughput group (ABI
// 1.2), sized by HtSizing: Dispatch sends each token once to every rank hosting one of its
// experts (its tensors in an HTDispatchArgs, optional ones as nil *Tensor), Combine sums
// the returned rows per token, with FlagBackwardWeights carrying weights back too; the same
// two calls run the backward pass. Tensors are descriptors of device memory (Tensor); the
// package never allocates device memory. Close handles before their group.
package epcomm
