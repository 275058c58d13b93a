// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import "unsafe"

// HTHandle is the routing of one batch on a high-throughput Group (an EpcHandle from
// epc_ht_handle_create, ABI 1.2) and its layout: which tokens go to which rank and at which
// of the Rows they land there. Every Dispatch and Combine on it, forward and backward,
// reuses that layout. Create it with NewHTHandle and release it with Close before closing
// its Group; its calls wait for the Group's other calls as a Handle's do.
type HTHandle struct {
	handleRef
	rows   int64
	sizing HtSizing
}

// NewHTHandle creates a handle on the high-throughput group for the routing topkIdx
// (epc_ht_handle_create): it copies the routing ([B, K] int64 or int32 expert ids on the
// group's device, contiguous, -1 masking an entry; B <= MaxTokensPerRank, K <= MaxTopK),
// computes on the GPU which tokens go to which rank and where they land there, and
// exchanges those counts with every rank. sizing decides Rows: with HTSizingExact the call
// synchronises stream (nil = the legacy default stream) once to learn N; with
// HTSizingCapacity it does not. A low-latency group refuses it (its handles come from
// NewHandle). Collective over the group's ranks; stream-ordered (blocking with exact
// sizing); not graph-capturable (it allocates).
func NewHTHandle(group *Group, topkIdx Tensor, sizing HtSizing, stream unsafe.Pointer) (*HTHandle, error) {
	idx, err := topkIdx.toC("topk_idx")
	if err != nil {
		return nil, err
	}
	var rows C.int64_t
	ref, err := newHandleRef("NewHTHandle", group, func(group *C.EpcGroup, out **C.EpcHandle) C.EpcStatus {
		return C.epc_ht_handle_create(group, &idx, C.EpcHtSizing(sizing), stream, out, &rows)
	})
	if err != nil {
		return nil, err
	}
	return &HTHandle{handleRef: ref, rows: int64(rows), sizing: sizing}, nil
}

// Rows is the row count of every [rows, ...] tensor the handle's calls take: N, the tokens
// this rank receives, with HTSizingExact; NRanks * MaxTokensPerRank with HTSizingCapacity
// (rows at or past N are then left unspecified; N is on the device, see OutNumRecv).
func (h *HTHandle) Rows() int64 { return h.rows }

// Sizing is how the handle was created.
func (h *HTHandle) Sizing() HtSizing { return h.sizing }

// Update replaces the routing with topkIdx and recomputes the layout (epc_handle_update):
// same rules as NewHTHandle; B may change, K may not. Only HTSizingCapacity handles accept
// it (an exact handle's row count would change: create a new handle instead). No allocation
// and no host synchronisation (graph-capturable). Collective (the layout is exchanged);
// stream-ordered.
func (h *HTHandle) Update(topkIdx Tensor, stream unsafe.Pointer) error {
	if h == nil {
		return errNilHandle("HTHandle")
	}
	return h.update("HTHandle", topkIdx, stream)
}

// HTDispatchArgs are the tensors of HTHandle.Dispatch (epc_ht_dispatch). X and OutX are
// required; an optional tensor left nil is not passed (NULL). Shapes in C order: B the
// routing's tokens, H hidden, K top-k, L local experts, rows the handle's Rows.
type HTDispatchArgs struct {
	X               Tensor  // [B, H] in the group's 16-bit dtype (bf16 or fp16), or fp8_e4m3 with XScales
	XScales         *Tensor // fp8 X only: [B, H/128] float32, quantized by the caller (H % 128 == 0)
	TopkWeights     *Tensor // [B, K] float32; with OutTopkWeights: both or neither
	OutX            Tensor  // [rows, H], X's dtype: the received tokens, by (source rank, source token)
	OutScales       *Tensor // fp8 X only: [rows, H/128] float32, the scales copied unchanged
	OutTopkIdx      *Tensor // [rows, K] int32: the local expert id of entry k where local, else -1
	OutTopkWeights  *Tensor // [rows, K] float32: the weight of entry k where local, else 0
	OutExpertCounts *Tensor // [L] int32: received (token, entry) pairs per local expert
	OutNumRecv      *Tensor // [1] int32: N
	Flags           Flags   // none are defined for dispatch yet: the library refuses any bit
}

// Dispatch sends each of this rank's tokens once to every rank hosting one of its unmasked
// entries and receives this rank's N tokens (epc_ht_dispatch); the tensors are in args. The
// gradient of a Combine is this call with the combine's output gradient as X. Collective
// over the group's ranks; stream-ordered on stream (nil = the legacy default stream);
// graph-capturable. The memory must stay allocated until the stream has passed the call.
func (h *HTHandle) Dispatch(args HTDispatchArgs, stream unsafe.Pointer) error {
	t, err := cTensors(tensorArg{"x", &args.X}, tensorArg{"x_scales", args.XScales},
		tensorArg{"topk_weights", args.TopkWeights}, tensorArg{"out_x", &args.OutX},
		tensorArg{"out_scales", args.OutScales}, tensorArg{"out_topk_idx", args.OutTopkIdx},
		tensorArg{"out_topk_weights", args.OutTopkWeights}, tensorArg{"out_expert_counts", args.OutExpertCounts},
		tensorArg{"out_num_recv", args.OutNumRecv})
	if err != nil {
		return err
	}
	return h.run(func(handle *C.EpcHandle) C.EpcStatus {
		return C.epc_ht_dispatch(handle, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8],
			C.EpcFlags(args.Flags), stream)
	})
}

// Combine returns the rows to their tokens' ranks and sums them there (epc_ht_combine):
//
//   - x [rows, H] bf16, in Dispatch's row order (the caller has already weighted and summed
//     its local experts' outputs);
//   - out [B, H] bf16: per token, the float32 sum over the ranks that received it, in
//     ascending rank order, rounded once; tokens sent nowhere get zeros;
//   - with FlagBackwardWeights also topkWeights [rows, K] float32 into outTopkWeights [B, K]
//     float32: entry k of a token takes the value the rank hosting entry k's expert holds
//     for it (0 where masked); without the flag both must be nil.
//
// x must not overlap out. The gradient of a Dispatch is this call with the row gradients as
// x. Collective; stream-ordered; graph-capturable.
func (h *HTHandle) Combine(x Tensor, topkWeights *Tensor, out Tensor, outTopkWeights *Tensor, flags Flags,
	stream unsafe.Pointer) error {
	t, err := cTensors(tensorArg{"x", &x}, tensorArg{"topk_weights", topkWeights}, tensorArg{"out", &out},
		tensorArg{"out_topk_weights", outTopkWeights})
	if err != nil {
		return err
	}
	return h.run(func(handle *C.EpcHandle) C.EpcStatus {
		return C.epc_ht_combine(handle, t[0], t[1], t[2], t[3], C.EpcFlags(flags), stream)
	})
}

// Close frees the handle's device memory once the work queued on it has finished
// (epc_handle_destroy). Local; blocking. The handle is gone afterwards even when Close
// reports an error, and calling Close again returns nil. Close every handle of a Group
// before the Group.
func (h *HTHandle) Close() error {
	if h == nil {
		return nil
	}
	return h.close()
}

// run calls fn with the live C handle under the group's lock (see handleRef.run).
func (h *HTHandle) run(fn func(handle *C.EpcHandle) C.EpcStatus) error {
	if h == nil {
		return errNilHandle("HTHandle")
	}
	return h.handleRef.run("HTHandle", fn)
}
