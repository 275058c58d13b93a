// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import (
	"math"
	"time"
	"unsafe"
)

// GroupConfig configures a group (EpcGroupConfig). The zero value of every field means the
// library's default; NumExperts and Hidden are required. The library validates the
// configuration (PlanQuery and NewGroup validate it the same way).
type GroupConfig struct {
	Mode             Mode          // 0: ModeLowLatency
	NumExperts       uint32        // required: total experts, divisible by the rank count
	Hidden           uint32        // required: channels per token; a bf16 row is a multiple of 16 bytes
	MaxTokensPerRank uint32        // 0: 128 (LL) or 4096 (HT); at most 1024 (LL), 65536 (HT)
	MaxTopK          uint32        // 0: 8; at most 32
	NumSMs           uint32        // SM budget for the kernels; 0: mode default (LL 132, HT 24)
	Timeout          time.Duration // bound on every device-side wait, whole milliseconds (rounded up); 0: 10 s

	// MaxTokenBytes is the dispatch bytes per token the window holds, payload plus scales;
	// 0: 2*Hidden (bf16 or fp16 payloads, fp8 fits too). Down to Hidden + Hidden/32 (fp8
	// with one float32 scale per 128 channels, Hidden a multiple of 128): such a group
	// carries fp8 payloads only. Values are rounded down to one of these two sizes.
	MaxTokenBytes uint32
	// RecvCapacity is the tokens per rank the receive window holds; 0: NRanks *
	// MaxTokensPerRank, which never overflows (fewer: ErrUnsupported in ABI 2.0; served
	// since 2.1 on high-throughput groups, of one node or several, to FLAT handles).
	RecvCapacity uint64
	// Overflow is what a step does when more rows arrive than a handle holds; 0: OverflowFail.
	Overflow Overflow
	// MaxPendingSteps bounds the send-only steps awaiting Complete at once over all the
	// group's handles (one per handle); 0: the default, 2 since ABI 2.1 (1 in 2.0); up to 3
	// (more: ErrUnsupported), each above 2 adding a receive slot per direction (LL).
	MaxPendingSteps uint32
	// Flags are EPC_GROUP_* bits (GroupCombinePerEntry: ErrUnsupported in ABI 2.0; served
	// since 2.1 on LL and HT groups of any number of nodes).
	Flags uint32

	// VirtualNodeSize is a testing and tuning aid. 0: a node is an NVLink (LSA)
	// team. Otherwise every LSA team is split into virtual nodes of this many consecutive
	// ranks (it must divide the team size): ranks in different virtual nodes then exchange
	// data only through the network transport (between virtual nodes an NVLink-backed
	// stand-in with the network's ordering rules), never through direct NVLink stores, so
	// one host runs the code paths of a multi-node group. GroupInfo's Node and NumNodes then
	// count virtual nodes, and the plan gains a RegionNetStaging region.
	VirtualNodeSize uint32

	// AllocFn and FreeFn are a C allocator for the symmetric window (EpcAllocFn and
	// EpcFreeFn: C function pointers, e.g. from dlsym; not Go functions), set both or
	// neither; nil means ncclMemAlloc. AllocCtx is passed to them untouched; the group keeps
	// it for FreeFn, so it must stay valid until the group is closed. By cgo's pointer rules
	// it must not point to Go memory (C keeps it past the call, and NewGroup and PlanQuery
	// pass it inside a struct in Go memory): use C memory (C.malloc) or nil. cgo's check of
	// call arguments (GODEBUG=cgocheck, on by default) panics on a Go pointer here.
	AllocFn, FreeFn, AllocCtx unsafe.Pointer
}

// toC fills an EpcGroupConfig of this header's size and version.
func (cfg *GroupConfig) toC() (C.EpcGroupConfig, error) {
	var c C.EpcGroupConfig
	timeoutMs, err := timeoutMilliseconds("GroupConfig.Timeout", cfg.Timeout)
	if err != nil {
		return c, err
	}
	c.struct_size = C.uint32_t(unsafe.Sizeof(c))
	c.abi_version = C.uint32_t(ABIVersion)
	c.mode = C.EpcMode(cfg.Mode)
	c.num_experts = C.uint32_t(cfg.NumExperts)
	c.hidden = C.uint32_t(cfg.Hidden)
	c.max_tokens_per_rank = C.uint32_t(cfg.MaxTokensPerRank)
	c.max_topk = C.uint32_t(cfg.MaxTopK)
	c.max_token_bytes = C.uint32_t(cfg.MaxTokenBytes)
	c.recv_capacity = C.uint64_t(cfg.RecvCapacity)
	c.overflow = C.EpcOverflow(cfg.Overflow)
	c.max_pending_steps = C.uint32_t(cfg.MaxPendingSteps)
	c.flags = C.uint32_t(cfg.Flags)
	c.num_sms = C.uint32_t(cfg.NumSMs)
	c.timeout_ms = C.uint32_t(timeoutMs)
	c.virtual_node_size = C.uint32_t(cfg.VirtualNodeSize)
	c.alloc_fn = C.EpcAllocFn(cfg.AllocFn)
	c.free_fn = C.EpcFreeFn(cfg.FreeFn)
	c.alloc_ctx = cfg.AllocCtx
	return c, nil
}

// timeoutMilliseconds rounds a positive duration, the argument `name`, up to whole
// milliseconds (so 1 ns does not become 0, "default" or "no bound").
func timeoutMilliseconds(name string, d time.Duration) (uint32, error) {
	if d < 0 {
		return 0, argumentError("%s is %v; it must not be negative", name, d)
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxUint32 {
		return 0, argumentError("%s is %v; at most %d ms fit", name, d, uint32(math.MaxUint32))
	}
	return uint32(ms), nil
}

// millisecondsToDuration is the reverse, for values the library reports.
func millisecondsToDuration(ms C.uint32_t) time.Duration {
	return time.Duration(ms) * time.Millisecond
}
