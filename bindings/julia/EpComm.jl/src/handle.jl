# SPDX-License-Identifier: Apache-2.0
# Handles: the routing of one batch on a group. `Handle` (low-latency) and `HtHandle`
# (high-throughput, ht.jl) share `AbstractHandle`: `update!`, `close`, `isopen`.

"""
    AbstractHandle

A handle of either mode (`EpcHandle*`): [`Handle`](@ref) on a low-latency group,
[`HtHandle`](@ref) on a high-throughput one. Both have [`update!`](@ref), `close` and
`isopen`; both are closed before their group and never by a finalizer.
"""
abstract type AbstractHandle end

"""
    Handle

The routing of one batch on a low-latency [`Group`](@ref) (`EpcHandle*`) and the device state
a step needs: [`ll_dispatch`](@ref) (or [`ll_dispatch_fp8`](@ref)), [`ll_combine`](@ref) and
[`complete`](@ref) run on it,
[`update!`](@ref) gives it the next step's routing.

Close it before its group (`close(group)` refuses while a handle is open). `close` is local
and waits for the GPU work queued on the handle. No finalizer closes a handle, since one
could run after its group was closed: an unreachable, unclosed handle is only counted (see
[`unclosed_handles`](@ref)).

The handle keeps the tensors of its latest call referenced until its next call or `close`,
so that arrays handed to a stream-ordered call (or to a send-only step, until `complete`)
are not collected while the GPU may still use them. Calls on a handle are not thread-safe
with other calls on the same group: drive a group and its handles from one task.
"""
mutable struct Handle <: AbstractHandle
    handle::Ptr{EpcHandle}
    group::Group
    in_flight::Vector{Tensor}
end

"""
    Handle(group::Group, topk_idx; stream = nothing) -> Handle

Create a handle for the routing `topk_idx` (`epc_handle_create`): C shape `[B, K]` (a Julia
`(K, B)` matrix, one token per column), `Int64` or `Int32` expert ids, `-1` masking an entry,
contiguous, on the group's device; `B <= max_tokens_per_rank`, `K <= max_topk`. `topk_idx` is a
[`Tensor`](@ref) or anything `Tensor(x)` accepts (a `CuArray` with CUDA.jl loaded). The
routing is copied on `stream` (see `barrier` for the stream forms), so `topk_idx` may be
reused once that stream has passed this point. Allocates device memory. A high-throughput
group refuses it (its handles are [`HtHandle`](@ref)s). Local; stream-ordered; not
graph-capturable.
"""
function Handle(group::Group, topk_idx; stream = nothing)
    idx = to_tensor(topk_idx)
    out = Ref{Ptr{EpcHandle}}(C_NULL)
    GC.@preserve idx stream begin
        check(epc_handle_create(handle(group), Ref(idx.raw), stream_pointer(stream), out),
              :epc_handle_create)
    end
    return registered(Handle(out[], group, Tensor[]))
end

"""
    Handle(f, group::Group, topk_idx; stream = nothing)

`Handle(group, topk_idx; stream)`, passed to `f` and closed when `f` returns or throws
(`Handle(group, topk_idx) do h ... end`).
"""
Handle(f::Function, group::Group, topk_idx; stream = nothing) =
    closing(f, Handle(group, topk_idx; stream))

"Count a new handle as open on its group, with the finalizer that counts it if never closed."
function registered(h::AbstractHandle)
    h.group.open_handles += 1
    finalizer(count_if_unclosed, h)
    return h
end

"`f(h)`, then `close(h)` however `f` ends: the do-block forms of the handle constructors."
function closing(f, h::AbstractHandle)
    try
        return f(h)
    finally
        close(h)
    end
end

"""
    update!(h::AbstractHandle, topk_idx; stream = nothing) -> h

Replace the routing with `topk_idx` for the next step (`epc_handle_update`): same rules as the
handle's constructor; `B` may change, `K` may not. Call it after the previous step's combine.
No allocation and no host synchronisation (graph-capturable); stream-ordered. On a
[`Handle`](@ref) it is local. On an [`HtHandle`](@ref) it also recomputes the layout, which is
collective, and only a handle created with `sizing = :capacity` accepts it.
"""
function update!(h::AbstractHandle, topk_idx; stream = nothing)
    idx = to_tensor(topk_idx)
    GC.@preserve idx stream begin
        check(epc_handle_update(handle(h), Ref(idx.raw), stream_pointer(stream)), :epc_handle_update)
    end
    h.in_flight = Tensor[idx]
    return h
end

"""
    close(h::AbstractHandle)

Free the handle's device memory once the work queued on it has finished
(`epc_handle_destroy`). Local; blocking. The handle is gone afterwards even when the library
reports an error (then thrown as an [`EpcError`](@ref)); closing twice is a no-op.
"""
function Base.close(h::AbstractHandle)
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

Base.isopen(h::AbstractHandle) = h.handle != C_NULL

function handle(h::AbstractHandle)
    isopen(h) || throw(ArgumentError("the $(nameof(typeof(h))) is closed"))
    return h.handle
end
