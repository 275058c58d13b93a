// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <stdint.h>
#include <epcomm/epcomm.h>

static EpcStatus epcgo_group_barrier(EpcGroup* group, uintptr_t stream) {
  return epc_group_barrier(group, (void*)stream);
}
*/
import "C"

import (
	"sync"
	"time"
	"unsafe"
)

// Group is one rank's epcomm group (EpcGroup): the communicator, its symmetric window and
// its NCCL device communicator. Create it with NewGroup and release it with Close on every
// rank. Info and AsyncError may run concurrently with anything; Barrier, Close and the calls
// of the group's Handles wait for each other. Info and AsyncError wait only for Close.
type Group struct {
	mu sync.RWMutex
	// closing is held by Close while it takes the handle away, and by Info and AsyncError for
	// their calls, which therefore never wait for mu (the group's other calls).
	closing     sync.RWMutex
	handle      *C.EpcGroup // nil once closed; written under both locks, read under either
	comm        *Comm
	openHandles int // Handles created on the group and not closed yet
}

// GroupInfo describes a group: topology, configuration after defaults, memory held
// (EpcGroupInfo).
type GroupInfo struct {
	Rank, NRanks     int // in the communicator
	LSARank, LSASize int // in this rank's NVLink (LSA) team
	Node, NumNodes   int // this rank's node (LSA team, or virtual node: GroupConfig.VirtualNodeSize), how many
	CUDADevice       int
	Mode             Mode
	NumExperts       uint32
	LocalExperts     uint32 // NumExperts / NRanks
	Hidden           uint32
	MaxTokensPerRank uint32
	MaxTopK          uint32
	MaxTokenBytes    uint32
	RecvCapacity     uint64
	Overflow         Overflow
	MaxPendingSteps  uint32
	NumSMs           uint32
	Timeout          time.Duration
	Flags            uint32
	VirtualNodeSize  uint32
	SymmetricBytes   uint64 // device memory held in the registered window
	WorkspaceBytes   uint64 // other device memory held
}

// NewGroup creates a group on comm (epc_group_create): allocates and registers the
// symmetric window PlanQuery describes, creates the NCCL device communicator and proves
// every NVLink peer reachable with a barrier. It uses the CUDA device current on the calling
// OS thread, which must be the communicator's (see the package's thread rule).
// Collective over every rank of comm; blocking; not safe concurrently with other calls on
// the same communicator. Close the Group on every rank before closing comm.
func NewGroup(comm *Comm, cfg GroupConfig) (*Group, error) {
	cCfg, err := cfg.toC()
	if err != nil {
		return nil, err
	}
	if comm == nil { // the library names the NULL communicator
		comm = AdoptComm(nil)
	}
	comm.mu.Lock()
	defer comm.mu.Unlock()
	if comm.closed {
		return nil, argumentError("the Comm is closed")
	}
	var handle *C.EpcGroup
	err = call(func() C.EpcStatus { return C.epc_group_create(comm.handle, &cCfg, &handle) })
	if err != nil {
		return nil, err
	}
	comm.openGroups++
	return &Group{handle: handle, comm: comm}, nil
}

// Info describes the group (epc_group_query). Local, non-blocking, thread-safe: like
// AsyncError it does not wait for the group's other calls (a Barrier waiting for its peers,
// a handle's call), only for Close.
func (g *Group) Info() (GroupInfo, error) {
	g.closing.RLock()
	defer g.closing.RUnlock()
	if g.handle == nil {
		return GroupInfo{}, errGroupClosed()
	}
	var info C.EpcGroupInfo
	info.struct_size = C.uint32_t(unsafe.Sizeof(info))
	info.abi_version = C.uint32_t(ABIVersion)
	handle := g.handle
	if err := call(func() C.EpcStatus { return C.epc_group_query(handle, &info) }); err != nil {
		return GroupInfo{}, err
	}
	return GroupInfo{
		Rank: int(info.rank), NRanks: int(info.nranks),
		LSARank: int(info.lsa_rank), LSASize: int(info.lsa_size),
		Node: int(info.node), NumNodes: int(info.num_nodes),
		CUDADevice:       int(info.cuda_device),
		Mode:             Mode(info.mode),
		NumExperts:       uint32(info.num_experts),
		LocalExperts:     uint32(info.local_experts),
		Hidden:           uint32(info.hidden),
		MaxTokensPerRank: uint32(info.max_tokens_per_rank),
		MaxTopK:          uint32(info.max_topk),
		MaxTokenBytes:    uint32(info.max_token_bytes),
		RecvCapacity:     uint64(info.recv_capacity),
		Overflow:         Overflow(info.overflow),
		MaxPendingSteps:  uint32(info.max_pending_steps),
		NumSMs:           uint32(info.num_sms),
		Timeout:          millisecondsToDuration(info.timeout_ms),
		Flags:            uint32(info.flags),
		VirtualNodeSize:  uint32(info.virtual_node_size),
		SymmetricBytes:   uint64(info.symmetric_bytes),
		WorkspaceBytes:   uint64(info.workspace_bytes),
	}, nil
}

// Barrier runs the group's barrier kernel on stream (0 = the legacy default stream) and waits for it (epc_group_barrier): every rank of the group arrives
// before any leaves. A peer that does not arrive within the group's timeout makes it return
// ErrTimeout naming the peer, and the group stays failed. Collective over every rank of the
// group; blocking; not graph-capturable; serialized with other calls on this Group.
func (g *Group) Barrier(stream Stream) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.handle == nil {
		return errGroupClosed()
	}
	handle := g.handle
	return call(func() C.EpcStatus { return C.epcgo_group_barrier(handle, C.uintptr_t(stream)) })
}

// AsyncError says whether the group has failed asynchronously (epc_group_async_error),
// without waiting for anything: nil while no kernel of the group has recorded a
// failure (and no Barrier has failed on the host); otherwise the *Error that every later
// call on the group and its handles returns, with the same Status and, word for word, the
// same message: ErrTimeout when a kernel gave up waiting for a peer (the phase, the waiting
// rank, the peer, how long it waited), ErrInvalidArgument when the routing check found an
// expert id outside [-1, NumExperts). The failure is sticky until the group is closed.
//
// It reads the group's error record, which kernels write in mapped host memory, with no
// stream or device synchronisation, so a failure of work still queued shows once its kernel
// has recorded it; nil says nothing about work the GPU has not finished. Local;
// non-blocking; not stream-ordered; may be called during CUDA graph capture (it launches
// nothing); safe from any goroutine, also while another is inside a call on the group or
// its handles, which it does not wait for (it waits only for Close).
func (g *Group) AsyncError() error {
	if g == nil {
		return argumentError("AsyncError: the Group is nil")
	}
	g.closing.RLock()
	defer g.closing.RUnlock()
	if g.handle == nil {
		return errGroupClosed()
	}
	handle := g.handle
	return call(func() C.EpcStatus { return C.epc_group_async_error(handle) })
}

// Close releases everything the group holds (epc_group_destroy) once its work has finished.
// Collective: every rank must close its group, because window deregistration is
// collective; blocking. The group is gone afterwards even when Close reports an error, and
// calling Close again returns nil. It fails with ErrInvalidUsage, changing nothing, while a
// Handle created on the group is open, as epc_group_destroy does while the library holds one. No finalizer does this for you: see the package doc.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.handle == nil {
		return nil
	}
	if g.openHandles > 0 {
		return usageError("%d handle(s) created on this Group are still open: Close them first "+
			"(their device state belongs to the group)", g.openHandles)
	}
	g.closing.Lock() // waits for an AsyncError in progress
	handle := g.handle
	g.handle = nil
	g.closing.Unlock()
	err := call(func() C.EpcStatus { return C.epc_group_destroy(handle) })
	g.comm.mu.Lock()
	g.comm.openGroups--
	g.comm.mu.Unlock()
	return err
}

func errGroupClosed() error {
	return argumentError("the Group is closed")
}
