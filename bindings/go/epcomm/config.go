// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import (
	"fmt"
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
	Dtype            Dtype         // payload the group carries; 0: DtypeBF16
	NumSMs           uint32        // SM budget for the kernels; 0: mode default (LL 132, HT 24)
	Timeout          time.Duration // bound on every device-side wait, whole milliseconds (rounded up); 0: 10 s

	// VirtualNodeSize (ABI 1.3) is a testing and tuning aid. 0: a node is an NVLink (LSA)
	// team. Otherwise every LSA team is split into virtual nodes of this many consecutive
	// ranks (it must divide the team size): ranks in different virtual nodes then exchange
	// data only through the network transport (between virtual nodes an NVLink-backed
	// stand-in with the network's ordering rules), never through direct NVLink stores, so
	// one host runs the code paths of a multi-node group. GroupInfo's Node and NumNodes then
	// count virtual nodes, and the plan gains a RegionNetStaging region. A library older
	// than ABI 1.3 has no such field: PlanQuery and NewGroup refuse a non-zero value there
	// with ErrUnsupported, without calling it.
	VirtualNodeSize uint32

	// AllocFn and FreeFn are a C allocator for the symmetric window (EpcAllocFn and
	// EpcFreeFn: C function pointers, e.g. from dlsym; not Go functions), set both or
	// neither; nil means ncclMemAlloc. AllocCtx is passed to them untouched and, by cgo's
	// rules, must not point to Go memory.
	AllocFn, FreeFn, AllocCtx unsafe.Pointer
}

// toC fills an EpcGroupConfig of this header's size and version.
func (cfg *GroupConfig) toC() (C.EpcGroupConfig, error) {
	var c C.EpcGroupConfig
	timeoutMs, err := timeoutMilliseconds(cfg.Timeout)
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
	c.dtype = C.EpcDtype(cfg.Dtype)
	c.num_sms = C.uint32_t(cfg.NumSMs)
	c.timeout_ms = C.uint32_t(timeoutMs)
	c.virtual_node_size = C.uint32_t(cfg.VirtualNodeSize)
	c.alloc_fn = C.EpcAllocFn(cfg.AllocFn)
	c.free_fn = C.EpcFreeFn(cfg.FreeFn)
	c.alloc_ctx = cfg.AllocCtx
	return c, nil
}

// virtualNodesVersion is the first ABI whose EpcGroupConfig has virtual_node_size (before
// it the field was reserved0, which had to be 0).
var virtualNodesVersion = LibraryVersion{1, 3, 0}

// checkSupported refuses what the loaded library cannot read from cfg (see supportedBy).
func (cfg *GroupConfig) checkSupported() error {
	if err := checkLibraryOnce(); err != nil {
		return err
	}
	return cfg.supportedBy(loadedVersion)
}

// supportedBy refuses a setting that a library of ABI `library` cannot read: a field newer
// than that library, which it takes for a reserved field that must be 0.
func (cfg *GroupConfig) supportedBy(library LibraryVersion) error {
	if cfg.VirtualNodeSize != 0 && library.older(virtualNodesVersion) {
		return &Error{Status: ErrUnsupported, Message: fmt.Sprintf(
			"GroupConfig.VirtualNodeSize (%d) needs libepcomm ABI %v or newer, but the loaded "+
				"library implements ABI %v, which has no virtual nodes; leave it 0 there",
			cfg.VirtualNodeSize, virtualNodesVersion, library)}
	}
	return nil
}

// timeoutMilliseconds rounds a positive duration up to whole milliseconds (so 1 ns does
// not become 0, "default").
func timeoutMilliseconds(d time.Duration) (uint32, error) {
	if d < 0 {
		return 0, argumentError("GroupConfig.Timeout is %v; it must not be negative", d)
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxUint32 {
		return 0, argumentError("GroupConfig.Timeout is %v; at most %d ms fit", d, uint32(math.MaxUint32))
	}
	return uint32(ms), nil
}

// millisecondsToDuration is the reverse, for values the library reports.
func millisecondsToDuration(ms C.uint32_t) time.Duration {
	return time.Duration(ms) * time.Millisecond
}
