// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <stdint.h>
#include <epcomm/epcomm.h>

// The argument structs are assembled here, on the C stack: Go passes the struct with its
// tensor fields NULL, the converted tensors and a bit per present field, so no Go memory
// that cgo hands to C holds a Go pointer. Streams arrive as integers (Stream) and become
// pointers here, so that Go never converts an integer into an unsafe.Pointer.
static const EpcTensor* epcgo_field(const EpcTensor* t, uint32_t present, int i) {
  return ((present >> i) & 1u) ? &t[i] : NULL;
}

static EpcStatus epcgo_handle_create(EpcGroup* group, const EpcHandleConfig* config,
                                     const EpcRouting* routing, const EpcTensor* t,
                                     uint32_t present, uintptr_t stream, EpcHandle** out) {
  if (routing == NULL) return epc_handle_create(group, config, NULL, (void*)stream, out);
  EpcRouting r = *routing;
  r.topk_idx = epcgo_field(t, present, 0);
  r.num_tokens = epcgo_field(t, present, 1);
  return epc_handle_create(group, config, &r, (void*)stream, out);
}

static EpcStatus epcgo_handle_update(EpcHandle* handle, const EpcRouting* routing,
                                     const EpcTensor* t, uint32_t present, uintptr_t stream) {
  if (routing == NULL) return epc_handle_update(handle, NULL, (void*)stream);
  EpcRouting r = *routing;
  r.topk_idx = epcgo_field(t, present, 0);
  r.num_tokens = epcgo_field(t, present, 1);
  return epc_handle_update(handle, &r, (void*)stream);
}

// Assemble the args on the caller's (C) stack.
static void epcgo_dispatch_args(EpcDispatchArgs* a, const EpcDispatchArgs* args,
                                const EpcTensor* t, uint32_t present) {
  *a = *args;
  a->x = epcgo_field(t, present, 0);
  a->x_scales = epcgo_field(t, present, 1);
  a->x_global_scale = epcgo_field(t, present, 2);
  a->topk_weights = epcgo_field(t, present, 3);
  a->out_x = epcgo_field(t, present, 4);
  a->out_scales = epcgo_field(t, present, 5);
  a->out_topk_idx = epcgo_field(t, present, 6);
  a->out_topk_weights = epcgo_field(t, present, 7);
  a->out_expert_counts = epcgo_field(t, present, 8);
  a->out_expert_offsets = epcgo_field(t, present, 9);
  a->out_rank_counts = epcgo_field(t, present, 10);
  a->out_num_recv = epcgo_field(t, present, 11);
  a->out_expert_counts_host = epcgo_field(t, present, 12);
  a->acc_expert_counts = epcgo_field(t, present, 13);
}

static void epcgo_combine_args(EpcCombineArgs* a, const EpcCombineArgs* args,
                               const EpcTensor* t, uint32_t present) {
  *a = *args;
  a->x = epcgo_field(t, present, 0);
  a->topk_weights = epcgo_field(t, present, 1);
  a->home_topk_weights = epcgo_field(t, present, 2);
  a->out = epcgo_field(t, present, 3);
  a->out_topk_weights = epcgo_field(t, present, 4);
}

static EpcStatus epcgo_dispatch(EpcHandle* handle, const EpcDispatchArgs* args,
                                const EpcTensor* t, uint32_t present, uintptr_t stream) {
  if (args == NULL) return epc_dispatch(handle, NULL, (void*)stream);
  EpcDispatchArgs a;
  epcgo_dispatch_args(&a, args, t, present);
  return epc_dispatch(handle, &a, (void*)stream);
}

static EpcStatus epcgo_combine(EpcHandle* handle, const EpcCombineArgs* args,
                               const EpcTensor* t, uint32_t present, uintptr_t stream) {
  if (args == NULL) return epc_combine(handle, NULL, (void*)stream);
  EpcCombineArgs a;
  epcgo_combine_args(&a, args, t, present);
  return epc_combine(handle, &a, (void*)stream);
}

// For the tests: what the assembled structs hold, field by C field (the tensor's dtype,
// 0 for NULL), and their scalar fields.
#define EPCGO_DT(p) ((p) == NULL ? 0u : (p)->dtype)
static void epcgo_probe_dispatch(const EpcDispatchArgs* args, const EpcTensor* t,
                                 uint32_t present, uint32_t out[20]) {
  EpcDispatchArgs a;
  epcgo_dispatch_args(&a, args, t, present);
  const EpcTensor* f[14] = {a.x, a.x_scales, a.x_global_scale, a.topk_weights, a.out_x,
                            a.out_scales, a.out_topk_idx, a.out_topk_weights,
                            a.out_expert_counts, a.out_expert_offsets, a.out_rank_counts,
                            a.out_num_recv, a.out_expert_counts_host, a.acc_expert_counts};
  for (int i = 0; i < 14; i++) out[i] = EPCGO_DT(f[i]);
  out[14] = a.flags;
  out[15] = a.quant;
  out[16] = a.scale_block;
  out[17] = a.scale_layout;
  out[18] = a.send_sms;
  out[19] = a.max_step_tokens;
}
static void epcgo_probe_combine(const EpcCombineArgs* args, const EpcTensor* t,
                                uint32_t present, uint32_t out[8]) {
  EpcCombineArgs a;
  epcgo_combine_args(&a, args, t, present);
  const EpcTensor* f[5] = {a.x, a.topk_weights, a.home_topk_weights, a.out, a.out_topk_weights};
  for (int i = 0; i < 5; i++) out[i] = EPCGO_DT(f[i]);
  out[5] = a.flags;
  out[6] = a.weighting;
  out[7] = a.send_sms;
}

static EpcStatus epcgo_complete(EpcHandle* handle, uintptr_t stream) {
  return epc_complete(handle, 0, (void*)stream);
}
*/
import "C"

import "unsafe"

// HandleConfig is how a handle lays out what its rank receives (EpcHandleConfig). The zero
// value of every field means the library's default; CreateHandle takes nil for all
// defaults.
type HandleConfig struct {
	Layout          Layout // 0: LayoutDefault (LayoutExpertPadded on LL groups, LayoutFlat on HT groups)
	Sizing          Sizing // 0: SizingCapacity (never synchronises the host); SizingExact: rows = what arrives
	Capacity        uint64 // C; 0: the layout's default (since 2.1 HT FLAT capacities below it too; the header says which)
	ExpertAlignment uint32 // LayoutExpertPacked only; else 0
	Flags           uint32 // HandleGlobalExpertIDs, HandleZeroPadding
}

// Routing is one batch's routing (EpcRouting): TopKIdx is required, [B, K] int32 or int64
// expert ids on the group's device, -1 masking an entry, B <= MaxTokensPerRank,
// K <= MaxTopK. It is copied on the stream, so its memory may be reused once the stream has
// passed the call. NumTokens ([1] int32 on the device: only the first n rows take part) is
// defined by the ABI and refused with ErrUnsupported by libraries 2.0 to 2.2.
type Routing struct {
	TopKIdx   *Tensor
	NumTokens *Tensor
}

// HandleInfo describes a handle after defaults (EpcHandleInfo).
type HandleInfo struct {
	Mode            Mode // the group's
	Layout          Layout
	Sizing          Sizing
	ExpertAlignment uint32
	NumTokens       uint32 // B of the current routing (0 before the first)
	TopK            uint32 // K of the current routing (0 before the first)
	Pending         uint32 // PendingNone, PendingDispatch or PendingCombine: the send-only call awaiting Complete
	Flags           uint32
	Capacity        uint64 // C
	Rows            int64  // the first dimension of [rows, ...] tensors; SizingExact: the rows this rank receives
	OverflowStatus  Status // OK, or ErrCapacity when the last dispatch received more rows than C
	OverflowRank    int32  // the rank whose receive overflowed, -1 for none
	OverflowRows    int64  // rows that did not fit (OverflowDrop: dropped)
	ID              uint64 // ABI 2.1: the handle's number in its group (1, 2, ... in creation order); messages name it
}

// DispatchArgs are the fields of Handle.Dispatch (EpcDispatchArgs). X and OutX are
// required; a nil *Tensor is an absent field (NULL). Shapes per layout: B this rank's
// tokens, K top-k, H hidden, L local experts, R ranks, T MaxTokensPerRank, C the handle's
// capacity, rows as HandleInfo reports them, S = H / scale block.
//
//	LayoutExpertPadded (LL): OutX [L, C, H], OutScales [L, C, S], OutExpertCounts [L]
//	LayoutFlat (HT):         OutX [rows, H], OutScales [rows, S], OutTopKIdx and
//	                         OutTopKWeights [rows, K], OutExpertCounts [L], OutNumRecv [1]
type DispatchArgs struct {
	Flags       uint32      // StepSendOnly, DispatchPow2Scales
	Quant       Quant       // 0: QuantNone; QuantFP8 casts in the send kernel (LL); QuantPassthrough copies caller-quantized X and XScales (HT; LL since 2.1)
	ScaleBlock  uint32      // channels per scale; 0: 128 (FP8)
	ScaleLayout ScaleLayout // 0: ScalesStrided

	X            *Tensor // required: [B, H] bf16 or fp16 (QuantPassthrough: fp8_e4m3 [B, H] or fp4_e2m1x2 [B, H/2])
	XScales      *Tensor // QuantPassthrough: [B, S] of any scale dtype
	XGlobalScale *Tensor // QuantNVFP4, and QuantPassthrough of fp4_e2m1x2 X: [1] float32, the same on every rank; not sent
	TopKWeights  *Tensor // [B, K] float32: required by OutTopKWeights and by the expert layouts' default combine (WeightingSender weights by it; without it combine with WeightingHome and HomeTopKWeights, LL since ABI 2.2)

	OutX                *Tensor // required: X's dtype (QuantFP8: fp8_e4m3)
	OutScales           *Tensor // with QuantFP8 or QuantPassthrough: the scales' dtype
	OutTopKIdx          *Tensor // int32: the entry's expert id where its expert is on this rank, else -1
	OutTopKWeights      *Tensor // float32: the entry's weight where its expert is on this rank, else 0
	OutExpertCounts     *Tensor // [L] int32: rows per local expert (LayoutFlat: received (token, entry) pairs)
	OutExpertOffsets    *Tensor // [L + 1] int32 or int64 (LayoutExpertPacked)
	OutRankCounts       *Tensor // [R] int32 (LayoutRankMajor)
	OutNumRecv          *Tensor // [1] int32: rows that arrived (LayoutFlat, LayoutExpertPacked)
	OutExpertCountsHost *Tensor // [L] int32 in pinned host memory: a copy of the counts queued after the step
	AccExpertCounts     *Tensor // [L] int64: rows per local expert added at every step (the caller zeroes it)

	// ABI 2.1: the SMs the sending launch may occupy (the send half's grid with StepSendOnly,
	// else the whole step's); 0: the group's NumSMs; at most that and the GPU's SM count.
	// Outputs do not depend on it; a 2.0 library refuses a non-zero value (ErrABIMismatch).
	SendSMs uint32
	// ABI 2.2: the most tokens any rank of the group dispatches in this step (every rank's B
	// at most this), the same on every rank; 0: MaxTokensPerRank. A bound of few tokens lets
	// an LL group of one node move the step as line records; outputs do not depend on it.
	// Above MaxTokensPerRank or below this rank's B: ErrInvalidArgument; ranks that pass
	// different values: ErrTimeout saying so, and the group fails. A 2.1 library refuses a
	// non-zero value (ErrABIMismatch).
	MaxStepTokens uint32
}

func (a *DispatchArgs) fields() []tensorField {
	return []tensorField{{"x", a.X}, {"x_scales", a.XScales}, {"x_global_scale", a.XGlobalScale},
		{"topk_weights", a.TopKWeights}, {"out_x", a.OutX}, {"out_scales", a.OutScales},
		{"out_topk_idx", a.OutTopKIdx}, {"out_topk_weights", a.OutTopKWeights},
		{"out_expert_counts", a.OutExpertCounts}, {"out_expert_offsets", a.OutExpertOffsets},
		{"out_rank_counts", a.OutRankCounts}, {"out_num_recv", a.OutNumRecv},
		{"out_expert_counts_host", a.OutExpertCountsHost}, {"acc_expert_counts", a.AccExpertCounts}}
}

// toC converts the args: their scalar fields into an EpcDispatchArgs whose tensor fields
// are NULL (nil for nil args), their tensors into set.
func (a *DispatchArgs) toC(set *tensorSet) (*C.EpcDispatchArgs, error) {
	if a == nil {
		return nil, nil
	}
	if err := set.convert(a.fields()...); err != nil {
		return nil, err
	}
	base := &C.EpcDispatchArgs{}
	base.struct_size = C.uint32_t(unsafe.Sizeof(*base))
	base.abi_version = C.uint32_t(ABIVersion)
	base.flags = C.uint32_t(a.Flags)
	base.quant = C.EpcQuant(a.Quant)
	base.scale_block = C.uint32_t(a.ScaleBlock)
	base.scale_layout = C.EpcScaleLayout(a.ScaleLayout)
	base.send_sms = C.uint32_t(a.SendSMs)
	base.max_step_tokens = C.uint32_t(a.MaxStepTokens)
	return base, nil
}

// probe returns what the C side assembles from a (see epcgo_probe_dispatch), for the tests.
func (a *DispatchArgs) probe() ([20]uint32, error) {
	var out [20]C.uint32_t
	set := &tensorSet{}
	base, err := a.toC(set)
	if err != nil {
		return [20]uint32{}, err
	}
	C.epcgo_probe_dispatch(base, &set.tensors[0], set.present, &out[0])
	var values [20]uint32
	for i, v := range out {
		values[i] = uint32(v)
	}
	return values, nil
}

// CombineArgs are the fields of Handle.Combine (EpcCombineArgs). X and Out are required;
// a nil *Tensor is an absent field.
type CombineArgs struct {
	Flags     uint32    // StepSendOnly
	Weighting Weighting // 0: WeightingDefault (sender-weighted on expert layouts, none on LayoutFlat)

	X               *Tensor // required: the expert outputs in dispatch OutX's shape, bf16
	TopKWeights     *Tensor // HT, with OutTopKWeights: per received row, float32, dispatch OutTopKWeights' shape
	HomeTopKWeights *Tensor // WeightingHome: [B, K] float32
	Out             *Tensor // required: [B, H] bf16, fp16 or float32; must not overlap X
	OutTopKWeights  *Tensor // [B, K] float32: entry k takes the value the rank hosting its expert sent

	SendSMs uint32 // ABI 2.1: as DispatchArgs.SendSMs
}

func (a *CombineArgs) fields() []tensorField {
	return []tensorField{{"x", a.X}, {"topk_weights", a.TopKWeights}, {"home_topk_weights", a.HomeTopKWeights},
		{"out", a.Out}, {"out_topk_weights", a.OutTopKWeights}}
}

// toC is DispatchArgs.toC for combine.
func (a *CombineArgs) toC(set *tensorSet) (*C.EpcCombineArgs, error) {
	if a == nil {
		return nil, nil
	}
	if err := set.convert(a.fields()...); err != nil {
		return nil, err
	}
	base := &C.EpcCombineArgs{}
	base.struct_size = C.uint32_t(unsafe.Sizeof(*base))
	base.abi_version = C.uint32_t(ABIVersion)
	base.flags = C.uint32_t(a.Flags)
	base.weighting = C.EpcWeighting(a.Weighting)
	base.send_sms = C.uint32_t(a.SendSMs)
	return base, nil
}

// probe returns what the C side assembles from a (see epcgo_probe_combine).
func (a *CombineArgs) probe() ([8]uint32, error) {
	var out [8]C.uint32_t
	set := &tensorSet{}
	base, err := a.toC(set)
	if err != nil {
		return [8]uint32{}, err
	}
	C.epcgo_probe_combine(base, &set.tensors[0], set.present, &out[0])
	var values [8]uint32
	for i, v := range out {
		values[i] = uint32(v)
	}
	return values, nil
}

// Handle is one batch's routing on a Group (EpcHandle), of the group's mode, and the
// device state its steps need: Dispatch, Combine and Complete run on it, Update gives it
// the next step's routing. Create it with CreateHandle and release it with Close before
// closing its Group. Its calls and the calls of its Group (except Info and AsyncError)
// wait for each other: the library keeps per-group step state that they update. That
// makes them safe from several goroutines, not meaningful: steps are collective, so drive
// one group's steps from one goroutine, in the same order on every rank.
type Handle struct {
	handle *C.EpcHandle // nil once closed; read and written under group.mu
	group  *Group
}

// routingToC converts an optional routing: base is nil for a nil routing.
func routingToC(routing *Routing, set *tensorSet) (*C.EpcRouting, error) {
	if routing == nil {
		return nil, nil
	}
	if err := set.convert(tensorField{"topk_idx", routing.TopKIdx}, tensorField{"num_tokens", routing.NumTokens}); err != nil {
		return nil, err
	}
	base := &C.EpcRouting{}
	base.struct_size = C.uint32_t(unsafe.Sizeof(*base))
	base.abi_version = C.uint32_t(ABIVersion)
	return base, nil
}

// CreateHandle creates a handle on group (epc_handle_create). cfg nil means every default.
// With routing nil the call is local and only allocates: create every handle before CUDA
// graph capture and route it with Update inside the capture. With routing it is taken as
// Update takes it (on a high-throughput group that is collective, and blocking with
// SizingExact). stream orders the routing copy. Not graph-capturable (it allocates).
func CreateHandle(group *Group, cfg *HandleConfig, routing *Routing, stream Stream) (*Handle, error) {
	if group == nil {
		return nil, argumentError("CreateHandle: the Group is nil")
	}
	var cCfg *C.EpcHandleConfig
	if cfg != nil {
		cCfg = &C.EpcHandleConfig{}
		cCfg.struct_size = C.uint32_t(unsafe.Sizeof(*cCfg))
		cCfg.abi_version = C.uint32_t(ABIVersion)
		cCfg.layout = C.EpcLayout(cfg.Layout)
		cCfg.sizing = C.EpcSizing(cfg.Sizing)
		cCfg.capacity = C.uint64_t(cfg.Capacity)
		cCfg.expert_alignment = C.uint32_t(cfg.ExpertAlignment)
		cCfg.flags = C.uint32_t(cfg.Flags)
	}
	set := &tensorSet{}
	cRouting, err := routingToC(routing, set)
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
	err = call(func() C.EpcStatus {
		return C.epcgo_handle_create(groupHandle, cCfg, cRouting, &set.tensors[0], set.present, C.uintptr_t(stream), &handle)
	})
	if err != nil {
		return nil, err
	}
	group.openHandles++
	return &Handle{handle: handle, group: group}, nil
}

// run calls fn with the live C handle while holding the group's lock, or reports a nil or
// closed handle without calling the library.
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

// Update replaces the routing for the next step (epc_handle_update); routing is required.
// B may change, K may not after the first routing. On a high-throughput group it also
// computes where every token lands and exchanges the counts (collective). Graph-capturable
// with SizingCapacity; blocking with SizingExact, whose Rows may then change. Refused
// with ErrInvalidUsage while a send-only step is pending on the handle.
func (h *Handle) Update(routing *Routing, stream Stream) error {
	set := &tensorSet{}
	cRouting, err := routingToC(routing, set)
	if err != nil {
		return err
	}
	return h.run(func(handle *C.EpcHandle) C.EpcStatus {
		return C.epcgo_handle_update(handle, cRouting, &set.tensors[0], set.present, C.uintptr_t(stream))
	})
}

// Query describes the handle (epc_handle_query): layout, capacity and rows after defaults,
// what is pending and the last dispatch's overflow. Local; host-only.
func (h *Handle) Query() (HandleInfo, error) {
	var info C.EpcHandleInfo
	info.struct_size = C.uint32_t(unsafe.Sizeof(info))
	info.abi_version = C.uint32_t(ABIVersion)
	err := h.run(func(handle *C.EpcHandle) C.EpcStatus { return C.epc_handle_query(handle, &info) })
	if err != nil {
		return HandleInfo{}, err
	}
	return HandleInfo{
		Mode:            Mode(info.mode),
		Layout:          Layout(info.layout),
		Sizing:          Sizing(info.sizing),
		ExpertAlignment: uint32(info.expert_alignment),
		NumTokens:       uint32(info.num_tokens),
		TopK:            uint32(info.topk),
		Pending:         uint32(info.pending),
		Flags:           uint32(info.flags),
		Capacity:        uint64(info.capacity),
		Rows:            int64(info.rows),
		OverflowStatus:  Status(info.overflow_status),
		OverflowRank:    int32(info.overflow_rank),
		OverflowRows:    int64(info.overflow_rows),
		ID:              uint64(info.id),
	}, nil
}

// Dispatch sends each of this rank's tokens to the ranks hosting its unmasked entries and
// receives this rank's rows in the handle's layout (epc_dispatch). With StepSendOnly in
// args.Flags only the sending half is queued and Complete writes the outputs. Collective
// over the group; stream-ordered on stream; graph-capturable. args nil is refused by the
// library (X and OutX are required). Errors: ErrInvalidArgument (a shape, dtype or field),
// ErrInvalidUsage (no routing, a step pending), ErrUnsupported (a layout, quant or field
// this library does not serve yet), ErrCapacity (the previous dispatch overflowed).
func (h *Handle) Dispatch(args *DispatchArgs, stream Stream) error {
	set := &tensorSet{}
	base, err := args.toC(set)
	if err != nil {
		return err
	}
	return h.run(func(handle *C.EpcHandle) C.EpcStatus {
		return C.epcgo_dispatch(handle, base, &set.tensors[0], set.present, C.uintptr_t(stream))
	})
}

// Combine returns the expert outputs to their tokens' ranks and reduces them there
// (epc_combine): on the expert's rank a token's rows are weighted (args.Weighting) and
// summed in float32 in top-k order into one partial, rounded once to bf16; on the token's
// rank the partials are summed in float32 over ranks in ascending order and rounded once
// to Out's dtype. Tokens sent nowhere get zeros. On high-throughput groups this is also
// the backward of Dispatch (TopKWeights and OutTopKWeights carry the weights' gradients).
// Flags, collectiveness, stream and errors as for Dispatch.
func (h *Handle) Combine(args *CombineArgs, stream Stream) error {
	set := &tensorSet{}
	base, err := args.toC(set)
	if err != nil {
		return err
	}
	return h.run(func(handle *C.EpcHandle) C.EpcStatus {
		return C.epcgo_combine(handle, base, &set.tensors[0], set.present, C.uintptr_t(stream))
	})
}

// Complete finishes the handle's pending send-only Dispatch or Combine (epc_complete): it
// waits on the device for every peer and writes the outputs that call named. stream must
// be ordered after the send-only call. Handles of a group complete in any order.
// ErrInvalidUsage when nothing is pending. Collective; stream-ordered; graph-capturable.
func (h *Handle) Complete(stream Stream) error {
	return h.run(func(handle *C.EpcHandle) C.EpcStatus { return C.epcgo_complete(handle, C.uintptr_t(stream)) })
}

// Close frees the handle's device memory once the work queued on it has finished
// (epc_handle_destroy); a pending step gives up its slot. Local; blocking. The handle is
// gone afterwards even when Close reports an error, and calling Close again (or on nil)
// returns nil. Close every handle of a Group before the Group.
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
