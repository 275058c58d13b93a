# SPDX-License-Identifier: Apache-2.0
# Handles: one batch's routing on a group, of the group's mode, and its steps: dispatch,
# combine, complete (ABI 2.0: one handle type, named argument structs).

"""
    Handle

One batch's routing on a [`Group`](@ref) (`EpcHandle*`), of the group's mode (low latency or
high throughput), its receive layout, and the device state a step needs: [`dispatch`](@ref),
[`combine`](@ref) and [`complete`](@ref) run on it, [`update!`](@ref) gives it the next
step's routing, [`info`](@ref) describes it.

Close it before its group (`close(group)` refuses while a handle is open). `close` is local
and waits for the GPU work queued on the handle. No finalizer closes a handle, since one
could run after its group was closed: an unreachable, unclosed handle is only counted (see
[`unclosed_handles`](@ref)).

The handle keeps the tensors of its latest call referenced until its next call or `close`,
so that arrays handed to a stream-ordered call (or to a send-only step, until `complete`)
are not collected while the GPU may still use them. Calls on a handle are not thread-safe
with other calls on the same group: drive a group and its handles from one task.
"""
mutable struct Handle
    handle::Ptr{EpcHandle}
    group::Group
    in_flight::Vector{Tensor}
end

"""
    HandleInfo

A handle after defaults (`EpcHandleInfo`): `mode`, `layout`, `sizing`, `expert_alignment`,
the current routing's `num_tokens` and `topk` (0 before the first), `pending`
(`EPC_PENDING_*`: the send-only call awaiting [`complete`](@ref)), `flags`, `capacity`,
`rows` (the first dimension of `[rows, ...]` tensors; with `sizing = :exact` the rows this
rank receives), and the last dispatch's overflow: `overflow_status` (`EPC_OK` or
`EPC_ERR_CAPACITY`), `overflow_rank` (-1 for none), `overflow_rows`; `id` (ABI 2.1): the
handle's number in its group, 1, 2, ... in creation order, by which messages name it.
"""
struct HandleInfo
    mode::EpcMode
    layout::EpcLayout
    sizing::EpcSizing
    expert_alignment::Int
    num_tokens::Int
    topk::Int
    pending::Int
    flags::UInt32
    capacity::Int
    rows::Int
    overflow_status::EpcStatus
    overflow_rank::Int
    overflow_rows::Int
    id::UInt64
end

HandleInfo(raw::EpcHandleInfo) = HandleInfo((getfield(raw, name) for name in fieldnames(HandleInfo))...)

"The code of a named choice (`:flat`), or the code itself; `what` names the field for errors."
function named_code(::Type{T}, names::Dict{Symbol,T}, what::String, choice) where {T}
    choice isa Integer && return T(choice)
    choice isa Symbol && haskey(names, choice) && return names[choice]
    throw(ArgumentError("unknown $what $(repr(choice)) (known: " *
                        join(sort!([":$n" for n in keys(names)]), ", ") * ", or a code)"))
end

const LAYOUTS = Dict(:default => EPC_LAYOUT_DEFAULT, :expert_padded => EPC_LAYOUT_EXPERT_PADDED,
                     :expert_packed => EPC_LAYOUT_EXPERT_PACKED, :rank_major => EPC_LAYOUT_RANK_MAJOR,
                     :flat => EPC_LAYOUT_FLAT)
const SIZINGS = Dict(:capacity => EPC_SIZING_CAPACITY, :exact => EPC_SIZING_EXACT)
const QUANTS = Dict(:none => EPC_QUANT_NONE, :fp8 => EPC_QUANT_FP8, :nvfp4 => EPC_QUANT_NVFP4,
                    :passthrough => EPC_QUANT_PASSTHROUGH)
const SCALE_LAYOUTS = Dict(:strided => EPC_SCALES_STRIDED, :swizzled_128x4 => EPC_SCALES_SWIZZLED_128X4)
const WEIGHTINGS = Dict(:default => EPC_WEIGHTING_DEFAULT, :none => EPC_WEIGHTING_NONE,
                        :sender => EPC_WEIGHTING_SENDER, :home => EPC_WEIGHTING_HOME)

layout_code(choice) = named_code(EpcLayout, LAYOUTS, "layout", choice)
sizing_code(choice) = named_code(EpcSizing, SIZINGS, "sizing", choice)
quant_code(choice) = named_code(EpcQuant, QUANTS, "quant", choice)
scale_layout_code(choice) = named_code(EpcScaleLayout, SCALE_LAYOUTS, "scale_layout", choice)
weighting_code(choice) = named_code(EpcWeighting, WEIGHTINGS, "weighting", choice)

"""
    default_stream()

The stream a call uses when its `stream` keyword is left out: with CUDA.jl loaded (EpComm's
CUDA extension), the task's stream `CUDA.stream()`, on which CUDA.jl queues its own work;
without it `nothing`, the legacy default stream. Pass `stream = nothing` to ask for the
legacy default stream explicitly.
"""
function default_stream()
    provider = stream_provider[]
    return provider === nothing ? nothing : provider()
end

"Set by EpComm's CUDA extension to `CUDA.stream`; `nothing` without it."
const stream_provider = Ref{Any}(nothing)

"""
    TensorFields

The tensor keywords of one call, converted (`to_tensor`, `nothing` kept), and the C
descriptors they point to; `pointers` gives each present field's `Ptr{EpcTensor}`, valid while
the `TensorFields` is preserved (`GC.@preserve`).
"""
struct TensorFields
    names::Vector{Symbol}
    tensors::Vector{Tensor}
    raw::Vector{EpcTensor}
end

function TensorFields(fields::NamedTuple)
    names, tensors = Symbol[], Tensor[]
    for (name, value) in pairs(fields)
        value === nothing && continue
        push!(names, name)
        push!(tensors, to_tensor(value))
    end
    return TensorFields(names, tensors, EpcTensor[t.raw for t in tensors])
end

"`name => Ptr{EpcTensor}` for every present field (preserve `fields` while they are used)."
pointers(fields::TensorFields) =
    (name => pointer(fields.raw, i) for (i, name) in enumerate(fields.names))

"""
    Handle(group::Group; layout = :default, sizing = :capacity, capacity = 0,
           expert_alignment = 0, flags = 0, topk_idx = nothing, num_tokens = nothing,
           stream = default_stream()) -> Handle

Create a handle (`epc_handle_create`). The keywords are `EpcHandleConfig`'s fields
(`layout`: `:default`, `:expert_padded`, `:expert_packed`, `:rank_major`, `:flat` or a code;
`sizing`: `:capacity`, never synchronising the host, or `:exact`, rows = what arrives) and
`EpcRouting`'s (`topk_idx`, `num_tokens`). Without `topk_idx` the call is local and only
allocates: create every handle before graph capture and [`update!`](@ref) it inside. With
`topk_idx` (C shape `[B, K]`, a Julia `(K, B)` matrix; `Int64` or `Int32` expert ids, `-1`
masking an entry, on the group's device) the routing is taken as `update!` takes it
(collective on high-throughput groups; blocking with `sizing = :exact`). Not
graph-capturable (allocates). Errors: `EPC_ERR_UNSUPPORTED` for a layout, sizing or capacity
this library does not serve yet, `EPC_ERR_INVALID_ARGUMENT` for one meaningless for the
mode.
"""
function Handle(group::Group; layout = :default, sizing = :capacity, capacity::Integer = 0,
                expert_alignment::Integer = 0, flags::Integer = 0, topk_idx = nothing,
                num_tokens = nothing, stream = default_stream())
    config = extensible(EpcHandleConfig; layout = layout_code(layout), sizing = sizing_code(sizing),
                        capacity, expert_alignment, flags)
    fields = TensorFields((; topk_idx, num_tokens))
    out = Ref{Ptr{EpcHandle}}(C_NULL)
    GC.@preserve fields stream begin
        routing = topk_idx === nothing && num_tokens === nothing ? Ptr{EpcRouting}(C_NULL) :
                  Ref(extensible(EpcRouting; pointers(fields)...))
        check(epc_handle_create(handle(group), Ref(config), routing, stream_pointer(stream), out),
              :epc_handle_create)
    end
    h = Handle(out[], group, fields.tensors)
    h.group.open_handles += 1
    finalizer(count_if_unclosed, h)
    return h
end

"""
    Handle(f, group::Group; keywords...)

`Handle(group; keywords...)`, passed to `f` and closed when `f` returns or throws
(`Handle(group; topk_idx) do h ... end`).
"""
function Handle(f::Function, group::Group; keywords...)
    h = Handle(group; keywords...)
    try
        return f(h)
    finally
        close(h)
    end
end

"""
    update!(h::Handle; topk_idx, num_tokens = nothing, stream = default_stream()) -> h

Replace the routing for the next step (`epc_handle_update`), keywords as `EpcRouting`'s
fields: `topk_idx` is required; `B` may change, `K` may not after the first routing. On a
high-throughput group it also computes where every token lands and exchanges the counts
(collective). Graph-capturable with `sizing = :capacity`; blocking with `:exact`, whose rows
may then change. `EPC_ERR_INVALID_USAGE` while a send-only step is pending.
"""
function update!(h::Handle; topk_idx, num_tokens = nothing, stream = default_stream())
    fields = TensorFields((; topk_idx, num_tokens))
    GC.@preserve fields stream begin
        routing = extensible(EpcRouting; pointers(fields)...)
        check(epc_handle_update(handle(h), Ref(routing), stream_pointer(stream)), :epc_handle_update)
    end
    h.in_flight = fields.tensors
    return h
end

"""
    info(h::Handle) -> HandleInfo

Describe the handle (`epc_handle_query`): layout, capacity and rows after defaults, what is
pending, and the last dispatch's overflow. Local; host-only.
"""
function info(h::Handle)
    raw = Ref(extensible(EpcHandleInfo))
    check(epc_handle_query(handle(h), raw), :epc_handle_query)
    return HandleInfo(raw[])
end

"The `flags` of a step with the `send_only` (and `pow2_scales`) keywords added."
step_flags(flags::Integer, send_only::Bool, pow2_scales::Bool = false) =
    UInt32(flags) | (send_only ? EPC_STEP_SEND_ONLY : UInt32(0)) |
    (pow2_scales ? EPC_DISPATCH_POW2_SCALES : UInt32(0))

"""
    dispatch(h::Handle; x, out_x, topk_weights = nothing, quant = :none, flags = 0,
             send_only = false, pow2_scales = false, scale_block = 0, scale_layout = :strided,
             x_scales = nothing, x_global_scale = nothing, out_scales = nothing,
             out_topk_idx = nothing, out_topk_weights = nothing, out_expert_counts = nothing,
             out_expert_offsets = nothing, out_rank_counts = nothing, out_num_recv = nothing,
             out_expert_counts_host = nothing, acc_expert_counts = nothing, send_sms = 0,
             max_step_tokens = 0, stream = default_stream())

Send each of this rank's tokens to the ranks hosting its unmasked entries and receive this
rank's rows in the handle's layout (`epc_dispatch`). The keywords are `EpcDispatchArgs`'
fields; a tensor left `nothing` is absent (NULL). Shapes in C order (a Julia array has them
reversed, see [`Tensor`](@ref)): B tokens, K top-k, H hidden, L local experts, C the
handle's capacity, rows as [`info`](@ref) reports, S = H / 128.

  - `x` `[B, H]` bf16 or fp16 (`quant = :passthrough`: fp8_e4m3 with `x_scales` `[B, S]`;
    since 2.1 in both modes also fp4_e2m1x2 `[B, H / 2]`, scales of any count and dtype,
    and NVFP4's `x_global_scale` `[1]` `Float32`, checked and not sent);
  - `topk_weights` `[B, K]` `Float32`: required by `out_topk_weights` and by the expert
    layouts' default combine (`:sender` weights by it; without it combine with `:home`);
  - expert-padded layout (LL): `out_x` `[L, C, H]`, `out_scales` `[L, C, S]` (with
    `quant = :fp8`, e4m3 with one `Float32` scale per 128 channels; `pow2_scales = true`
    rounds each up to a power of two), `out_expert_counts` `[L]` `Int32`;
  - flat layout (HT): `out_x` `[rows, H]`, `out_scales` `[rows, S]`, `out_topk_idx` `Int32`
    and `out_topk_weights` `Float32` `[rows, K]`, `out_expert_counts` `[L]`,
    `out_num_recv` `[1]`;
  - `out_expert_counts_host` `[L]` `Int32` in pinned host memory, `acc_expert_counts` `[L]`
    `Int64` (added to at every step; the caller zeroes it).

`send_only = true` (`EPC_STEP_SEND_ONLY`) queues only the sending half; [`complete`](@ref)
writes the outputs. `send_sms` (ABI 2.1): the SMs the sending launch may occupy (the send
half's grid with `send_only`, else the whole step's); 0: the group's `num_sms`; outputs do
not depend on it. `max_step_tokens` (ABI 2.2): the most tokens any rank of the group
dispatches in this step (every rank's B at most this), the same on every rank; 0:
`max_tokens_per_rank`; a bound of few tokens lets a low-latency group of one node move the
step as line records; outputs do not depend on it. Above `max_tokens_per_rank` or below
this rank's B: `EPC_ERR_INVALID_ARGUMENT`; ranks that pass different values:
`EPC_ERR_TIMEOUT` saying so, and the group fails. Collective over the group; stream-ordered;
graph-capturable. Errors: `EPC_ERR_INVALID_ARGUMENT` (a shape, dtype or field),
`EPC_ERR_INVALID_USAGE` (no routing, a step pending), `EPC_ERR_UNSUPPORTED` (not served
yet), `EPC_ERR_CAPACITY` (the previous dispatch overflowed).
"""
function dispatch(h::Handle; x, out_x, topk_weights = nothing, quant = :none, flags::Integer = 0,
                  send_only::Bool = false, pow2_scales::Bool = false, scale_block::Integer = 0,
                  scale_layout = :strided, x_scales = nothing, x_global_scale = nothing,
                  out_scales = nothing, out_topk_idx = nothing, out_topk_weights = nothing,
                  out_expert_counts = nothing, out_expert_offsets = nothing,
                  out_rank_counts = nothing, out_num_recv = nothing,
                  out_expert_counts_host = nothing, acc_expert_counts = nothing,
                  send_sms::Integer = 0, max_step_tokens::Integer = 0,
                  stream = default_stream())
    fields = TensorFields((; x, x_scales, x_global_scale, topk_weights, out_x, out_scales,
                           out_topk_idx, out_topk_weights, out_expert_counts, out_expert_offsets,
                           out_rank_counts, out_num_recv, out_expert_counts_host, acc_expert_counts))
    GC.@preserve fields stream begin
        args = extensible(EpcDispatchArgs; flags = step_flags(flags, send_only, pow2_scales),
                          quant = quant_code(quant), scale_block,
                          scale_layout = scale_layout_code(scale_layout), send_sms = UInt32(send_sms),
                          max_step_tokens = UInt32(max_step_tokens), pointers(fields)...)
        check(epc_dispatch(handle(h), Ref(args), stream_pointer(stream)), :epc_dispatch)
    end
    h.in_flight = fields.tensors
    return nothing
end

"""
    combine(h::Handle; x, out, weighting = :default, flags = 0, send_only = false,
            topk_weights = nothing, home_topk_weights = nothing, out_topk_weights = nothing,
            send_sms = 0, stream = default_stream())

Return the expert outputs to their tokens' ranks and reduce them there (`epc_combine`),
keywords as `EpcCombineArgs`' fields: `x` the expert outputs in dispatch `out_x`'s shape,
bf16; `out` `[B, H]` bf16, fp16 or `Float32`, not overlapping `x`. On the expert's rank a
token's rows are weighted (`weighting`: `:default`, sender-weighted on expert layouts) and
summed in `Float32` in top-k order into one partial, rounded once to bf16; on the token's
rank the partials are summed in `Float32` over ranks in ascending order and rounded once to
`out`'s dtype. Tokens sent nowhere get zeros. On high-throughput groups this is also the
backward of dispatch: `topk_weights` (dispatch `out_topk_weights`' shape) and
`out_topk_weights` `[B, K]` carry the weights' gradients back, both or neither.
`send_only`, `send_sms`, collectiveness, stream and errors as for [`dispatch`](@ref).
"""
function combine(h::Handle; x, out, weighting = :default, flags::Integer = 0,
                 send_only::Bool = false, topk_weights = nothing, home_topk_weights = nothing,
                 out_topk_weights = nothing, send_sms::Integer = 0, stream = default_stream())
    fields = TensorFields((; x, topk_weights, home_topk_weights, out, out_topk_weights))
    GC.@preserve fields stream begin
        args = extensible(EpcCombineArgs; flags = step_flags(flags, send_only),
                          weighting = weighting_code(weighting), send_sms = UInt32(send_sms),
                          pointers(fields)...)
        check(epc_combine(handle(h), Ref(args), stream_pointer(stream)), :epc_combine)
    end
    h.in_flight = fields.tensors
    return nothing
end

"""
    complete(h::Handle; stream = default_stream())

Finish the handle's pending send-only [`dispatch`](@ref) or [`combine`](@ref)
(`epc_complete`): wait, on the device, for every peer and write the outputs that call named.
`stream` must be ordered after the send-only call. Handles of a group complete in any
order. `EPC_ERR_INVALID_USAGE` when nothing is pending. Collective; stream-ordered;
graph-capturable.
"""
function complete(h::Handle; stream = default_stream())
    GC.@preserve stream begin
        check(epc_complete(handle(h), UInt32(0), stream_pointer(stream)), :epc_complete)
    end
    return nothing
end

"""
    close(h::Handle)

Free the handle's device memory once the work queued on it has finished
(`epc_handle_destroy`); a pending step gives up its slot. Local; blocking. The handle is gone
afterwards even when the library reports an error (then thrown as an [`EpcError`](@ref));
closing twice is a no-op.
"""
function Base.close(h::Handle)
    h.handle == C_NULL && return nothing
    raw = h.handle
    h.handle = C_NULL
    h.group.open_handles -= 1
    try
        check(epc_handle_destroy(raw), :epc_handle_destroy)
    finally
        h.in_flight = Tensor[]
    end
    return nothing
end

Base.isopen(h::Handle) = h.handle != C_NULL

function handle(h::Handle)
    isopen(h) || throw(ArgumentError("the Handle is closed"))
    return h.handle
end
