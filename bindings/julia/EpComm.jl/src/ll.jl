# SPDX-License-Identifier: Apache-2.0
# Low-latency dispatch, combine and complete on a Handle.

"The `EpcFlags` of a call: `EPC_FLAG_SEND_ONLY` or none."
send_only_flags(send_only::Bool) = send_only ? EPC_FLAG_SEND_ONLY : EpcFlags(0)

"The `EpcFlags` of an fp8 dispatch: `EPC_FLAG_SEND_ONLY` and `EPC_FLAG_FP8_POW2_SCALES`, each or none."
fp8_flags(send_only::Bool, pow2_scales::Bool) =
    send_only_flags(send_only) | (pow2_scales ? EPC_FLAG_FP8_POW2_SCALES : EpcFlags(0))

"""
    ll_dispatch(h::Handle, x, topk_weights, out_x, out_counts; send_only = false, stream = nothing)

Send this rank's tokens to the ranks hosting their experts and receive this rank's share,
expert-major (`epc_ll_dispatch`). Shapes in C order (outermost first; a Julia array has them
reversed, see [`Tensor`](@ref)):

  - `x` `[B, H]`: the tokens, in the group's 16-bit dtype (B as in the handle's routing);
  - `topk_weights` `[B, K]` `Float32`;
  - `out_x` `[L, R*T, H]`, `x`'s dtype: the rows each local expert received, ordered by
    (source rank, source token, top-k slot);
  - `out_counts` `[L]` `Int32`: rows per local expert.

Each is a [`Tensor`](@ref) or anything `Tensor(x)` accepts (a `CuArray` with CUDA.jl loaded;
bf16 stored as `UInt16` needs `Tensor(a; dtype = :bf16)`). With `send_only = true` only the
send is queued, and [`complete`](@ref) must follow on the same stream, before any other
dispatch or combine of the group, to write the outputs. Collective over the group's ranks;
stream-ordered; graph-capturable. Pass the stream your arrays' producers use (with CUDA.jl:
`stream = CUDA.stream()`); `nothing` is the legacy default stream.
"""
function ll_dispatch(h::Handle, x, topk_weights, out_x, out_counts;
                     send_only::Bool = false, stream = nothing)
    t = Tensor[to_tensor(x), to_tensor(topk_weights), to_tensor(out_x), to_tensor(out_counts)]
    GC.@preserve t stream begin
        check(epc_ll_dispatch(handle(h), Ref(t[1].raw), Ref(t[2].raw), Ref(t[3].raw), Ref(t[4].raw),
                              send_only_flags(send_only), stream_pointer(stream)),
              :epc_ll_dispatch)
    end
    h.in_flight = t
    return nothing
end

"""
    ll_dispatch_fp8(h::Handle, x, topk_weights, out_x, out_scales, out_counts;
                    send_only = false, pow2_scales = false, stream = nothing)

[`ll_dispatch`](@ref) with the payload cast to FP8 in the send kernel (`epc_ll_dispatch_fp8`,
ABI 1.1): each token row travels as e4m3 bytes with one `Float32` scale per 128 channels,
scale = max(amax, 1e-4) / 448 (with `pow2_scales = true`, `EPC_FLAG_FP8_POW2_SCALES`, rounded
up to a power of two), e4m3 = saturate(x / scale). Shapes in C order:

  - `x` `[B, H]` bf16 or fp16, `H % 128 == 0`;
  - `topk_weights` `[B, K]` `Float32`;
  - `out_x` `[L, R*T, H]` fp8_e4m3 (`UInt8` storage: `Tensor(a; dtype = :fp8_e4m3)`): the
    rows each local expert received, in `ll_dispatch`'s order;
  - `out_scales` `[L, R*T, H/128]` `Float32`: each received row's scales;
  - `out_counts` `[L]` `Int32`: rows per local expert.

Works on groups of any dtype (on an fp8_e4m3 group it is the only dispatch);
[`ll_combine`](@ref) takes bf16 expert outputs as usual. Tensor forms, `send_only` and
`stream` as for [`ll_dispatch`](@ref). Collective; stream-ordered; graph-capturable.
"""
function ll_dispatch_fp8(h::Handle, x, topk_weights, out_x, out_scales, out_counts;
                         send_only::Bool = false, pow2_scales::Bool = false, stream = nothing)
    t = Tensor[to_tensor(x), to_tensor(topk_weights), to_tensor(out_x), to_tensor(out_scales),
               to_tensor(out_counts)]
    GC.@preserve t stream begin
        check(epc_ll_dispatch_fp8(handle(h), Ref(t[1].raw), Ref(t[2].raw), Ref(t[3].raw),
                                  Ref(t[4].raw), Ref(t[5].raw), fp8_flags(send_only, pow2_scales),
                                  stream_pointer(stream)),
              :epc_ll_dispatch_fp8)
    end
    h.in_flight = t
    return nothing
end

"""
    ll_combine(h::Handle, expert_out, out; send_only = false, stream = nothing)

Return the expert outputs to their tokens' ranks and reduce them (`epc_ll_combine`):

  - `expert_out` `[L, R*T, H]` bf16, in the layout this handle's dispatch produced;
  - `out` `[B, H]` bf16: per token, the sum over the ranks hosting its unmasked entries
    (ascending) of that rank's partial (its entries' weighted sum in top-k order, in
    `Float32`, sent as bf16), in `Float32`, rounded to bf16. Fully masked tokens get zeros.

`expert_out` must not overlap `out`. Tensor forms, `send_only` and `stream` as for
[`ll_dispatch`](@ref). Collective; stream-ordered; graph-capturable.
"""
function ll_combine(h::Handle, expert_out, out; send_only::Bool = false, stream = nothing)
    t = Tensor[to_tensor(expert_out), to_tensor(out)]
    GC.@preserve t stream begin
        check(epc_ll_combine(handle(h), Ref(t[1].raw), Ref(t[2].raw), send_only_flags(send_only),
                             stream_pointer(stream)),
              :epc_ll_combine)
    end
    h.in_flight = t
    return nothing
end

"""
    complete(h::Handle; stream = nothing)

Finish the step whose [`ll_dispatch`](@ref) or [`ll_combine`](@ref) ran with
`send_only = true` (`epc_complete`): wait, on the device, for every peer's data and write that
call's outputs. Collective; stream-ordered; graph-capturable.
"""
function complete(h::Handle; stream = nothing)
    GC.@preserve stream begin
        check(epc_complete(handle(h), stream_pointer(stream)), :epc_complete)
    end
    return nothing
end
