// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import "unsafe"

// FlagNone runs both halves of a dispatch or combine in one call; FlagSendOnly (generated
// from EPC_FLAG_SEND_ONLY) queues only the sending half, and Complete finishes it.
// FlagFP8Pow2Scales (generated from EPC_FLAG_FP8_POW2_SCALES) makes LLDispatchFP8 round
// every scale up to a power of two (UE8M0-representable). FlagBackwardWeights (generated
// from EPC_FLAG_BACKWARD_WEIGHTS, ABI 1.2) makes HTHandle.Combine carry weights back too.
const FlagNone Flags = 0

// LLDispatch sends this rank's tokens to the ranks hosting their experts and receives this
// rank's share, expert-major (epc_ll_dispatch):
//
//   - x [B, H]: the tokens, in the group's 16-bit dtype (B as in the handle's routing; with
//     B = 0 a nil Data is fine);
//   - topkWeights [B, K] float32;
//   - outX [L, R*T, H], same dtype as x: the rows each local expert received, ordered by
//     (source rank, source token, top-k slot);
//   - outCounts [L] int32: rows per local expert.
//
// With FlagSendOnly only the send is queued, and Complete must follow on the same stream,
// before any other dispatch or combine of the group, to write the outputs. Collective over
// the group's ranks (every rank dispatches each step); stream-ordered on stream (nil = the
// legacy default stream); graph-capturable. The memory must stay allocated until the stream
// has passed the call (or its completion).
func (h *Handle) LLDispatch(x, topkWeights, outX, outCounts Tensor, flags Flags, stream unsafe.Pointer) error {
	t, err := cTensors(tensorArg{"x", &x}, tensorArg{"topk_weights", &topkWeights}, tensorArg{"out_x", &outX},
		tensorArg{"out_counts", &outCounts})
	if err != nil {
		return err
	}
	return h.run(func(handle *C.EpcHandle) C.EpcStatus {
		return C.epc_ll_dispatch(handle, t[0], t[1], t[2], t[3], C.EpcFlags(flags), stream)
	})
}

// LLDispatchFP8 is LLDispatch with the payload cast to FP8 in the send kernel
// (epc_ll_dispatch_fp8, ABI 1.1): each token row travels as e4m3 bytes with one float32
// scale per 128 channels, scale = max(amax, 1e-4) / 448 (with FlagFP8Pow2Scales rounded up
// to a power of two), e4m3 = saturate(x / scale):
//
//   - x [B, H] bf16 or fp16, H % 128 == 0;
//   - topkWeights [B, K] float32;
//   - outX [L, R*T, H] fp8_e4m3: the rows each local expert received, in LLDispatch's order;
//   - outScales [L, R*T, H/128] float32: each received row's scales;
//   - outCounts [L] int32: rows per local expert.
//
// Works on groups of any dtype (on an fp8_e4m3 group it is the only dispatch); LLCombine on
// the handle takes bf16 expert outputs as usual. Flags (FlagSendOnly too, finished by
// Complete), collectiveness and stream rules as for LLDispatch.
func (h *Handle) LLDispatchFP8(x, topkWeights, outX, outScales, outCounts Tensor, flags Flags, stream unsafe.Pointer) error {
	t, err := cTensors(tensorArg{"x", &x}, tensorArg{"topk_weights", &topkWeights}, tensorArg{"out_x", &outX},
		tensorArg{"out_scales", &outScales}, tensorArg{"out_counts", &outCounts})
	if err != nil {
		return err
	}
	return h.run(func(handle *C.EpcHandle) C.EpcStatus {
		return C.epc_ll_dispatch_fp8(handle, t[0], t[1], t[2], t[3], t[4], C.EpcFlags(flags), stream)
	})
}

// LLCombine returns the expert outputs to their tokens' ranks and reduces them
// (epc_ll_combine):
//
//   - expertOut [L, R*T, H] bf16: in the layout this handle's dispatch produced;
//   - out [B, H] bf16: per token, the sum over the ranks hosting its unmasked entries
//     (ascending) of that rank's partial (its entries' weighted sum in top-k order, in
//     float32, sent as bf16), in float32, rounded to bf16. Fully masked tokens get zeros.
//
// expertOut must not overlap out. Flags, collectiveness and stream rules as for LLDispatch.
func (h *Handle) LLCombine(expertOut, out Tensor, flags Flags, stream unsafe.Pointer) error {
	t, err := cTensors(tensorArg{"expert_out", &expertOut}, tensorArg{"out", &out})
	if err != nil {
		return err
	}
	return h.run(func(handle *C.EpcHandle) C.EpcStatus {
		return C.epc_ll_combine(handle, t[0], t[1], C.EpcFlags(flags), stream)
	})
}

// Complete finishes the step whose LLDispatch or LLCombine was queued with FlagSendOnly
// (epc_complete): it waits, on the device, for every peer's data and writes that call's
// outputs. Collective; stream-ordered; graph-capturable.
func (h *Handle) Complete(stream unsafe.Pointer) error {
	return h.run(func(handle *C.EpcHandle) C.EpcStatus { return C.epc_complete(handle, stream) })
}
