// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import "unsafe"

// Plan is the memory and resource layout a GroupConfig needs on one rank (EpcPlan).
type Plan struct {
	Mode            Mode
	NumSlots        uint32 // double-buffer depth: 2 for LL, 1 for HT
	SymmetricBytes  uint64 // the registered window (sum of regions, aligned)
	WorkspaceBytes  uint64 // ordinary device memory beside the window
	HandleBytes     uint64 // device memory one handle with the default HandleConfig holds
	RecvCapacity    uint64 // after defaults
	NumSMs          uint32 // SM budget the kernels will use
	WarpsPerBlock   uint32 // threads per block / 32
	LSABarriers     uint32 // NCCL LSA barriers requested in the device communicator
	GINContexts     uint32 // GIN contexts requested (0 while every rank shares one LSA team)
	GINSignals      uint32 // GIN signals requested
	MessageBytes    uint32 // bytes one token occupies in a dispatch receive buffer
	MaxTokenBytes   uint32 // after defaults and rounding
	MaxPendingSteps uint32 // after defaults
	Regions         []PlanRegion
}

// PlanRegion is one region of the symmetric window (EpcPlanRegion).
type PlanRegion struct {
	Kind   RegionKind
	Slot   uint32 // double-buffer slot (0 or 1), SlotNone if not per slot
	Offset uint64 // bytes from the start of the group's symmetric window
	Size   uint64 // bytes
	Name   string // e.g. "dispatch_recv[1]"
}

// PlanQuery computes the layout cfg needs on nranks ranks whose NVLink (LSA) domains hold
// lsaSize ranks each, on numNodes nodes, without touching a GPU (epc_plan_query). It
// validates cfg exactly as NewGroup does. With cfg.VirtualNodeSize set, lsaSize is the
// NVLink team that the virtual nodes split. Local, blocking (pure CPU), thread-safe.
func PlanQuery(cfg GroupConfig, nranks, lsaSize, numNodes int) (Plan, error) {
	cCfg, err := cfg.toC()
	if err != nil {
		return Plan{}, err
	}
	cNranks, err := int32Arg("nranks", nranks)
	if err != nil {
		return Plan{}, err
	}
	cLsaSize, err := int32Arg("lsaSize", lsaSize)
	if err != nil {
		return Plan{}, err
	}
	cNumNodes, err := int32Arg("numNodes", numNodes)
	if err != nil {
		return Plan{}, err
	}
	var plan C.EpcPlan
	plan.struct_size = C.uint32_t(unsafe.Sizeof(plan))
	plan.abi_version = C.uint32_t(ABIVersion)
	err = call(func() C.EpcStatus {
		return C.epc_plan_query(&cCfg, cNranks, cLsaSize, cNumNodes, &plan)
	})
	if err != nil {
		return Plan{}, err
	}
	return planFromC(&plan), nil
}

func planFromC(p *C.EpcPlan) Plan {
	out := Plan{
		Mode:            Mode(p.mode),
		NumSlots:        uint32(p.num_slots),
		SymmetricBytes:  uint64(p.symmetric_bytes),
		WorkspaceBytes:  uint64(p.workspace_bytes),
		NumSMs:          uint32(p.num_sms),
		WarpsPerBlock:   uint32(p.warps_per_block),
		LSABarriers:     uint32(p.lsa_barriers),
		GINContexts:     uint32(p.gin_contexts),
		GINSignals:      uint32(p.gin_signals),
		MessageBytes:    uint32(p.message_bytes),
		HandleBytes:     uint64(p.handle_bytes),
		RecvCapacity:    uint64(p.recv_capacity),
		MaxTokenBytes:   uint32(p.max_token_bytes),
		MaxPendingSteps: uint32(p.max_pending_steps),
	}
	count := int(p.num_regions)
	if count > len(p.regions) {
		count = len(p.regions)
	}
	out.Regions = make([]PlanRegion, count)
	for i := range out.Regions {
		r := &p.regions[i]
		out.Regions[i] = PlanRegion{
			Kind:   RegionKind(r.kind),
			Slot:   uint32(r.slot),
			Offset: uint64(r.offset),
			Size:   uint64(r.size),
			Name:   stringFromChars(r.name[:]),
		}
	}
	return out
}

// stringFromChars reads a NUL-terminated fixed C char array, never past its end.
func stringFromChars(chars []C.char) string {
	bytes := make([]byte, 0, len(chars))
	for _, c := range chars {
		if c == 0 {
			break
		}
		bytes = append(bytes, byte(c))
	}
	return string(bytes)
}
