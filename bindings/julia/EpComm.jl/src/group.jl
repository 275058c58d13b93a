# SPDX-License-Identifier: Apache-2.0
# Groups: a communicator's symmetric window and NCCL device communicator.

"""
    Group

An epcomm group (`EpcGroup*`): the symmetric window, the NCCL device communicator and the
configuration, on a [`Comm`](@ref) that must stay open while the group exists (`close(comm)`
refuses while it is open).

`close(group)` is collective (every rank destroys its group: window deregistration is
collective), so no finalizer closes a group: finalizers run at arbitrary times on one rank.
An unreachable, unclosed group is only counted (see [`unclosed_handles`](@ref)). `close`
refuses while a [`Handle`](@ref) created on the group is open.
"""
mutable struct Group
    handle::Ptr{EpcGroup}
    comm::Comm
    open_handles::Int  # handles created on the group and not closed yet
    lock::ReentrantLock  # `close` taking the handle away; `info`'s and `async_error`'s calls
end

Group(handle::Ptr{EpcGroup}, comm::Comm, open_handles::Int) =
    Group(handle, comm, open_handles, ReentrantLock())

"""
    Group(comm::Comm, config::GroupConfig) -> Group

Create a group (`epc_group_create`): allocate and register the symmetric window the plan
describes, create the device communicator, and prove every NVLink peer reachable. Uses the
CUDA device current on the calling thread, which must be the communicator's. Collective over
every rank of `comm`; blocking; not thread-safe with other calls on the same communicator.
"""
function Group(comm::Comm, config::GroupConfig)
    out = Ref{Ptr{EpcGroup}}(C_NULL)
    check(epc_group_create(handle(comm), Ref(c_config(config)), out), :epc_group_create)
    group = Group(out[], comm, 0)
    comm.open_groups += 1
    finalizer(count_if_unclosed, group)
    return group
end

"""
    Group(f, comm::Comm, config::GroupConfig)

`Group(comm, config)`, passed to `f` and closed when `f` returns or throws
(`Group(comm, config) do group ... end`). Closing is collective: after an error on one rank
it waits until the other ranks close too.
"""
function Group(f::Function, comm::Comm, config::GroupConfig)
    group = Group(comm, config)
    try
        return f(group)
    finally
        close(group)
    end
end

"""
    GroupInfo

A group's topology (rank, LSA team, node), its configuration after defaults, and the device
memory it holds (`EpcGroupInfo`). `node` is this rank's LSA team, or its virtual node when
the group was created with `virtual_node_size` (see [`GroupConfig`](@ref)); `num_nodes`
counts nodes the same way.
"""
struct GroupInfo
    rank::Int
    nranks::Int
    lsa_rank::Int
    lsa_size::Int
    node::Int
    num_nodes::Int
    cuda_device::Int
    mode::EpcMode
    num_experts::Int
    local_experts::Int
    hidden::Int
    max_tokens_per_rank::Int
    max_topk::Int
    max_token_bytes::Int
    recv_capacity::Int
    overflow::EpcOverflow
    max_pending_steps::Int
    num_sms::Int
    timeout_ms::Int
    flags::UInt32
    virtual_node_size::Int
    symmetric_bytes::Int
    workspace_bytes::Int
end

GroupInfo(raw::EpcGroupInfo) = GroupInfo((getfield(raw, name) for name in fieldnames(GroupInfo))...)

"""
    info(group) -> GroupInfo

Describe the group (`epc_group_query`). Local, non-blocking, thread-safe: it does not wait
for the group's other calls, and `close(group)` waits for it (never destroying the group
under it).
"""
function info(group::Group)
    raw = Ref(extensible(EpcGroupInfo))
    @lock group.lock check(epc_group_query(handle(group), raw), :epc_group_query)
    return GroupInfo(raw[])
end

"""
    barrier(group; stream = nothing)

Run the group's barrier kernel on `stream` and wait for it (`epc_group_barrier`): every
rank of the group arrives before any leaves. `stream` is a
`CuStream` (with CUDA.jl loaded), a `Ptr` to a `cudaStream_t`, or `nothing` for the legacy
default stream; left out, [`default_stream`](@ref) (`CUDA.stream()` with CUDA.jl loaded). A peer that does not arrive within the group's timeout raises an
[`EpcError`](@ref) with `EPC_ERR_TIMEOUT` naming it, and the group stays failed. Collective
over every rank of the group; blocking; not thread-safe with other calls on the same group.
"""
function barrier(group::Group; stream = default_stream())
    GC.@preserve stream begin
        check(epc_group_barrier(handle(group), stream_pointer(stream)), :epc_group_barrier)
    end
    return nothing
end

"""
    async_error(group) -> nothing

Throw the group's asynchronous error, if it has one (`epc_group_async_error`), without
waiting for anything; return `nothing` on a healthy group.

A kernel that gives up records its failure in the group, and every later call on the group or
its handles throws it. This throws the same [`EpcError`](@ref), same status and word for word
the same message, without such a call: `EPC_ERR_TIMEOUT` when a kernel gave up waiting for a
peer (the phase, the waiting rank, the peer that did not arrive, how long it waited),
`EPC_ERR_INVALID_ARGUMENT` when the routing check found an expert id outside
`[-1, num_experts)`. It reads the group's error record, which kernels write in mapped host
memory, with no stream or device synchronisation: a failure of work still queued shows once its
kernel has recorded it, and `nothing` says nothing about work the GPU has not finished.

Local; non-blocking; not stream-ordered; may be called during CUDA graph capture (it launches
nothing). Thread-safe, also while another thread is inside a call on the same group or its
handles, which it does not wait for; like [`info`](@ref) it takes the group's lock, so
`close(group)` waits for it (never destroying the group under it). A closed group throws an
`ArgumentError`.
"""
function async_error(group::Group)
    @lock group.lock check(epc_group_async_error(handle(group)), :epc_group_async_error)
    return nothing
end

"""
    close(group::Group)

Release the group's window, device communicator and memory (`epc_group_destroy`; waits for
its work). Collective over every rank; blocking. Closing twice is a no-op. Throws an
`ArgumentError`, changing nothing, while a [`Handle`](@ref) created on the group is open.
When the library refuses with `EPC_ERR_INVALID_USAGE` (it still holds a handle of the group)
nothing is released and the group stays open; after any other error the group is gone (the
library released what it could), and the error is thrown.
"""
function Base.close(group::Group)
    group.handle == C_NULL && return nothing
    group.open_handles > 0 &&
        throw(ArgumentError("$(group.open_handles) handle(s) created on this Group are still " *
                            "open: close them before the group"))
    # Only a refusal leaves the C group alive; after any other status its pointer is dead.
    # Taking the pointer under the lock waits for an `info` or `async_error` in flight; later
    # ones find it gone.
    raw = @lock group.lock begin
        taken = group.handle
        group.handle = C_NULL
        taken
    end
    raw == C_NULL && return nothing  # closed by another task meanwhile
    status = epc_group_destroy(raw)
    if status == EPC_ERR_INVALID_USAGE
        @lock group.lock (group.handle = raw)
    else
        group.comm.open_groups -= 1
    end
    check(status, :epc_group_destroy)
    return nothing
end

Base.isopen(group::Group) = group.handle != C_NULL

function handle(group::Group)
    isopen(group) || throw(ArgumentError("the Group is closed"))
    return group.handle
end

"""
    stream_pointer(stream) -> Ptr{Cvoid}

The `cudaStream_t` for the C ABI: `nothing` is NULL (the legacy default stream), a `Ptr` is
taken as is; EpComm's CUDA extension adds `CuStream`.
"""
stream_pointer(::Nothing) = C_NULL
stream_pointer(stream::Ptr) = convert(Ptr{Cvoid}, stream)
stream_pointer(stream) =
    throw(ArgumentError("cannot use a $(typeof(stream)) as a CUDA stream: pass a Ptr " *
                        "(cudaStream_t), nothing, or a CuStream after `using CUDA`"))
