# SPDX-License-Identifier: Apache-2.0
"""
    EpComm

Julia binding of epcomm: expert-parallel (Mixture-of-Experts) communication on NCCL's Device
API. Two layers:

  - `EpComm.LibEpComm` (generated from `epcomm.h`): the C ABI one to one, `@ccall` wrappers
    that take pointers and return the `EpcStatus`;
  - this module: the safe API. Failures become [`EpcError`](@ref) with the library's message,
    handles become objects with `close`, C structs are built with their size, ABI version and
    zero (= default) fields.

Loading (`__init__`): the library is `ENV["EPCOMM_LIB"]` if set, else the SONAME
`libepcomm.so.<EPC_ABI_MAJOR>` (`libepcomm.so.2`) found through the dynamic linker's search path. It is
opened once, and a library of another ABI major version is refused with a
[`LibraryError`](@ref).

Collective calls (`Comm`, `Group`, `barrier`, `close` of a comm or group) must be made by every
rank, in the same order, from one thread per rank; they block the calling OS thread, which
cannot reach a GC safepoint meanwhile (other Julia threads that need a collection wait for it).
[`dispatch`](@ref), [`combine`](@ref) and [`complete`](@ref) on a [`Handle`](@ref) (one
handle type for both modes, keyword arguments named as the C structs' fields) are collective
too, but stream-ordered: they return once the work is queued; so are `Handle(group;
topk_idx)` and `update!` on high-throughput groups. The `stream` keyword defaults to
[`default_stream`](@ref): `CUDA.stream()` with CUDA.jl loaded.
"""
module EpComm

using Libdl
using Preferences

include("LibEpComm.jl")
using .LibEpComm

include("errors.jl")
include("library.jl")
include("c_structs.jl")
include("dtypes.jl")
include("unique_id.jl")
include("comm.jl")
include("config.jl")
include("plan.jl")
include("group.jl")
include("tensor.jl")
include("handle.jl")

export EpcError, LibraryError, UniqueId, create_unique_id, Comm, adopt_comm, GroupConfig,
    Plan, PlanRegion, plan_query, Group, GroupInfo, barrier, async_error, Tensor, Handle,
    HandleInfo, update!, dispatch, combine, complete

function __init__()
    try
        load_library!()
    catch
        # Precompiling a package that uses EpComm (or EpComm's CUDA extension) loads EpComm
        # but calls nothing, so it needs no library; everywhere else the error stands.
        precompiling() || rethrow()
    end
    return nothing
end

precompiling() = Base.JLOptions().incremental != 0

end # module EpComm
