# SPDX-License-Identifier: Apache-2.0
# Communicators: an NCCL communicator rank, created here or adopted from the caller.

"""
    Comm

An NCCL communicator rank (an `ncclComm_t`) that groups are built on. Either created by
`Comm(id, nranks, rank)` (then `close` destroys it) or adopted from the caller with
[`adopt_comm`](@ref) (then the caller keeps owning it and `close` only forgets it).

Close every group built on a communicator before closing the communicator. `close` is
collective; so there is no closing finalizer: a finalizer runs on one rank at an arbitrary
time, and a collective call from it would hang or corrupt the other ranks. An unclosed,
unreachable `Comm` is only counted (see [`unclosed_handles`](@ref)).
"""
mutable struct Comm
    handle::Ptr{Cvoid}
    owned::Bool
    open_groups::Int  # groups built on the communicator and not closed yet
end

"""
    Comm(id::UniqueId, nranks, rank; cuda_device = -1, timeout_ms = 0) -> Comm

Create this process's rank of a communicator of `nranks` ranks (`epc_comm_init`); makes
`cuda_device` current on the calling thread (negative: keep the current device). Collective
over all `nranks` ranks, blocking; call it from one thread per rank.

With `timeout_ms = 0` it waits without a bound for every rank to join. Otherwise
(`epc_comm_init_config`, ABI 2.3) a rank that has not joined after `timeout_ms` milliseconds
(it died, or was given another id) makes it throw an [`EpcError`](@ref) with
`EPC_ERR_TIMEOUT` naming this rank, and what NCCL made of the communicator is aborted
(there is nothing to close). The communicator is then in NCCL's non-blocking mode, so that
[`Group`](@ref) bounds its NCCL steps by the group's `timeout_ms` too (NCCL calls of your own
on it return `ncclInProgress`: see NCCL's docs), and `close` waits at most `timeout_ms` for
NCCL to finalize it, then aborts it. A library older than 2.3 lacks the function (Julia's
"could not load symbol").
"""
function Comm(id::UniqueId, nranks::Integer, rank::Integer; cuda_device::Integer = -1,
              timeout_ms::Integer = 0)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    if timeout_ms == 0
        check(epc_comm_init(Ref(id.raw), nranks, rank, cuda_device, out), :epc_comm_init)
    else
        config = Ref(extensible(EpcCommConfig; timeout_ms))
        check(epc_comm_init_config(Ref(id.raw), nranks, rank, cuda_device, config, out),
              :epc_comm_init_config)
    end
    comm = Comm(out[], true, 0)
    finalizer(count_if_unclosed, comm)
    return comm
end

"""
    Comm(f, id::UniqueId, nranks, rank; cuda_device = -1, timeout_ms = 0)

`Comm(id, nranks, rank; cuda_device, timeout_ms)`, passed to `f` and closed when `f` returns
or throws (`Comm(id, nranks, rank) do comm ... end`). Closing is collective: after an error
on one rank it waits until the other ranks close too.
"""
function Comm(f::Function, id::UniqueId, nranks::Integer, rank::Integer; cuda_device::Integer = -1,
              timeout_ms::Integer = 0)
    comm = Comm(id, nranks, rank; cuda_device, timeout_ms)
    try
        return f(comm)
    finally
        close(comm)
    end
end

"""
    adopt_comm(nccl_comm::Ptr) -> Comm

Use an existing `ncclComm_t` (from NCCL.jl or another library). The caller keeps owning it:
it must outlive every group built on it, and `close` does not destroy it.
"""
function adopt_comm(nccl_comm::Ptr)
    nccl_comm == C_NULL && throw(ArgumentError("adopt_comm: the communicator is NULL"))
    return Comm(convert(Ptr{Cvoid}, nccl_comm), false, 0)
end

"""
    close(comm::Comm)

Destroy a communicator that `Comm(id, nranks, rank)` created (`epc_comm_destroy`;
collective, blocking, at most the `timeout_ms` it was created with, after which it is
aborted); forget an adopted one. Closing twice is a no-op. Throws an
`ArgumentError`, changing nothing, while a [`Group`](@ref) built on it is open.
"""
function Base.close(comm::Comm)
    comm.handle == C_NULL && return nothing
    comm.open_groups > 0 &&
        throw(ArgumentError("$(comm.open_groups) group(s) built on this Comm are still open: " *
                            "close them before the communicator"))
    if comm.owned
        check(epc_comm_destroy(comm.handle), :epc_comm_destroy)
    end
    comm.handle = C_NULL
    return nothing
end

Base.isopen(comm::Comm) = comm.handle != C_NULL

function handle(comm::Comm)
    isopen(comm) || throw(ArgumentError("the Comm is closed"))
    return comm.handle
end

const UNCLOSED = Threads.Atomic{Int}(0)

"""
    unclosed_handles() -> Int

How many owned communicators, groups and handles were garbage-collected without `close`.
Their C resources are still held: closing a communicator or a group is collective, and a
handle must be closed before its group, so finalizers cannot do it.
"""
unclosed_handles() = UNCLOSED[]

# The finalizer of Comm, Group and Handle. It runs at an arbitrary time on one rank, must not switch
# tasks (no I/O) and must not make collective calls, so it only counts.
function count_if_unclosed(object)
    if object.handle != C_NULL && (!(object isa Comm) || object.owned)
        Threads.atomic_add!(UNCLOSED, 1)
    end
    return nothing
end
