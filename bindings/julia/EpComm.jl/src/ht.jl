# SPDX-License-Identifier: Apache-2.0
# High-throughput handles (ABI 1.2): dispatch and combine, forward and backward.

"""
    HtHandle

The routing of one batch on a high-throughput [`Group`](@ref) (an `EpcHandle*` from
`epc_ht_handle_create`) and its layout: which tokens go to which rank, and at which of the
[`rows`](@ref) they land there. Every [`ht_dispatch`](@ref) and [`ht_combine`](@ref) on it,
forward and backward, reuses that layout; [`update!`](@ref) replaces the routing of a
handle created with `sizing = :capacity`.

Closing, finalizers, the tensors kept in flight and thread-safety as for
[`Handle`](@ref).
"""
mutable struct HtHandle <: AbstractHandle
    handle::Ptr{EpcHandle}
    group::Group
    rows::Int
    sizing::EpcHtSizing
    in_flight::Vector{Tensor}
end

"""
    HtHandle(group::Group, topk_idx; sizing = :exact, stream = nothing) -> HtHandle

Create a handle on a high-throughput group (`epc_ht_handle_create`): copy the routing
`topk_idx` (C shape `[B, K]`, a Julia `(K, B)` matrix; `Int64` or `Int32`, `-1` masking an
entry; `B <= max_tokens_per_rank`, `K <= max_topk`), compute on the GPU which tokens go to
which rank and where they land there, and exchange those counts with every rank.

`sizing` (`:exact`, `:capacity`, or an `EPC_HT_SIZING_*` code) decides [`rows`](@ref): with
`:exact` it is N, the tokens this rank receives, and this call synchronises `stream` once to
learn it; with `:capacity` it is `nranks * max_tokens_per_rank` and nothing waits (rows at or
past N are then left unspecified; N is on the device, see `out_num_recv`). A low-latency
group refuses it (its handles are [`Handle`](@ref)s). Collective over the group's ranks;
stream-ordered (blocking with `:exact`); not graph-capturable (it allocates).
"""
function HtHandle(group::Group, topk_idx; sizing = :exact, stream = nothing)
    idx = to_tensor(topk_idx)
    code = sizing_code(sizing)
    out, rows = Ref{Ptr{EpcHandle}}(C_NULL), Ref{Int64}(0)
    GC.@preserve idx stream begin
        check(epc_ht_handle_create(handle(group), Ref(idx.raw), code, stream_pointer(stream), out, rows),
              :epc_ht_handle_create)
    end
    return registered(HtHandle(out[], group, Int(rows[]), code, Tensor[]))
end

"""
    HtHandle(f, group::Group, topk_idx; sizing = :exact, stream = nothing)

`HtHandle(group, topk_idx; sizing, stream)`, passed to `f` and closed when `f` returns or
throws (`HtHandle(group, topk_idx) do h ... end`).
"""
HtHandle(f::Function, group::Group, topk_idx; sizing = :exact, stream = nothing) =
    closing(f, HtHandle(group, topk_idx; sizing, stream))

"""
    rows(h::HtHandle) -> Int

The row count of every `[rows, ...]` tensor the handle's calls take: N with `sizing = :exact`,
`nranks * max_tokens_per_rank` with `:capacity`.
"""
rows(h::HtHandle) = h.rows

const SIZING_NAMES = Dict(:exact => EPC_HT_SIZING_EXACT, :capacity => EPC_HT_SIZING_CAPACITY)

"The `EpcHtSizing` of `:exact`, `:capacity` or a code."
sizing_code(code::Integer) = EpcHtSizing(code)

function sizing_code(name::Symbol)
    haskey(SIZING_NAMES, name) && return SIZING_NAMES[name]
    throw(ArgumentError("unknown sizing :$name (known: :exact, :capacity)"))
end

"The `EpcFlags` of a combine: `EPC_FLAG_BACKWARD_WEIGHTS` or none."
backward_flags(backward::Bool) = backward ? EPC_FLAG_BACKWARD_WEIGHTS : EpcFlags(0)

"A tensor argument for the C ABI: its descriptor, or NULL for an absent optional one."
c_ref(::Nothing) = Ptr{EpcTensor}(C_NULL)
c_ref(tensor::Tensor) = Ref(tensor.raw)

"Each argument as a [`Tensor`](@ref) (see `to_tensor`), `nothing` kept as `nothing`."
optional_tensors(args...) = Union{Nothing,Tensor}[x === nothing ? nothing : to_tensor(x) for x in args]

"""
    ht_dispatch(h::HtHandle, x, out_x; x_scales = nothing, out_scales = nothing,
                topk_weights = nothing, out_topk_weights = nothing, out_topk_idx = nothing,
                out_expert_counts = nothing, out_num_recv = nothing, stream = nothing)

Send each of this rank's tokens once to every rank hosting one of its unmasked entries and
receive this rank's N tokens (`epc_ht_dispatch`). Shapes in C order (a Julia array has them
reversed, see [`Tensor`](@ref)); `rows` is [`rows(h)`](@ref); the keyword tensors are
optional (`nothing`: not passed):

  - `x` `[B, H]` in the group's 16-bit dtype (bf16 or fp16), or fp8_e4m3 with `x_scales`
    `[B, H/128]` `Float32` (quantized by the caller, copied unchanged; `H % 128 == 0`);
  - `out_x` `[rows, H]`, `x`'s dtype: the received tokens, ordered by (source rank, source
    token); `out_scales` `[rows, H/128]` `Float32` with fp8 `x`;
  - `topk_weights` `[B, K]` and `out_topk_weights` `[rows, K]` `Float32`, both or neither:
    the weight of entry k where its expert lives on this rank, else 0;
  - `out_topk_idx` `[rows, K]` `Int32`: the local expert id of entry k where local, else -1;
  - `out_expert_counts` `[L]` `Int32`: received (token, entry) pairs per local expert;
  - `out_num_recv` `[1]` `Int32`: N.

The gradient of a combine is this call with the combine's output gradient as `x`. Tensor
forms and `stream` as for [`ll_dispatch`](@ref). Collective; stream-ordered;
graph-capturable.
"""
function ht_dispatch(h::HtHandle, x, out_x; x_scales = nothing, out_scales = nothing,
                     topk_weights = nothing, out_topk_weights = nothing, out_topk_idx = nothing,
                     out_expert_counts = nothing, out_num_recv = nothing, stream = nothing)
    t = optional_tensors(x, x_scales, topk_weights, out_x, out_scales, out_topk_idx,
                         out_topk_weights, out_expert_counts, out_num_recv)
    GC.@preserve t stream begin
        check(epc_ht_dispatch(handle(h), c_ref(t[1]), c_ref(t[2]), c_ref(t[3]), c_ref(t[4]),
                              c_ref(t[5]), c_ref(t[6]), c_ref(t[7]), c_ref(t[8]), c_ref(t[9]),
                              EpcFlags(0), stream_pointer(stream)),
              :epc_ht_dispatch)
    end
    h.in_flight = Tensor[tensor for tensor in t if tensor !== nothing]
    return nothing
end

"""
    ht_combine(h::HtHandle, x, out; topk_weights = nothing, out_topk_weights = nothing,
               stream = nothing)

Return the rows to their tokens' ranks and sum them there (`epc_ht_combine`):

  - `x` `[rows, H]` bf16, in [`ht_dispatch`](@ref)'s row order (the caller has already
    weighted and summed its local experts' outputs);
  - `out` `[B, H]` bf16: per token, the `Float32` sum over the ranks that received it, in
    ascending rank order, rounded once; tokens sent nowhere get zeros.

Backward weights: passing `topk_weights` `[rows, K]` and `out_topk_weights` `[B, K]`
`Float32` (both, or neither) sets `EPC_FLAG_BACKWARD_WEIGHTS`: entry k of a token takes the
value the rank hosting entry k's expert holds for it (0 where masked). The gradient of a
dispatch is this call with the row gradients as `x`. `x` must not overlap `out`. Collective;
stream-ordered; graph-capturable.
"""
function ht_combine(h::HtHandle, x, out; topk_weights = nothing, out_topk_weights = nothing,
                    stream = nothing)
    backward = topk_weights !== nothing
    backward == (out_topk_weights !== nothing) ||
        throw(ArgumentError("backward weights: pass both topk_weights and out_topk_weights, or neither"))
    t = optional_tensors(x, topk_weights, out, out_topk_weights)
    GC.@preserve t stream begin
        check(epc_ht_combine(handle(h), c_ref(t[1]), c_ref(t[2]), c_ref(t[3]), c_ref(t[4]),
                             backward_flags(backward), stream_pointer(stream)),
              :epc_ht_combine)
    end
    h.in_flight = Tensor[tensor for tensor in t if tensor !== nothing]
    return nothing
end
