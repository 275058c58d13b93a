# SPDX-License-Identifier: Apache-2.0
# Bootstrap ids: the bytes every rank of a new communicator needs.

"""
    UniqueId

The 128 bytes (`EpcUniqueId`, an NCCL unique id) that let the ranks of a new communicator
find each other. One process creates it with [`create_unique_id`](@ref); every rank then
needs the same bytes: pass them as `bytes(id)` / `UniqueId(bytes)` or as text with `hex(id)` /
`UniqueId(hex)` (a file, a socket, an environment variable...).
"""
struct UniqueId
    raw::EpcUniqueId
end

const UNIQUE_ID_BYTES = Int(EPC_UNIQUE_ID_BYTES)

"""
    create_unique_id() -> UniqueId

A new id (`epc_unique_id_create`). Local, blocking, thread-safe.
"""
function create_unique_id()
    id = Ref{EpcUniqueId}()
    check(epc_unique_id_create(id), :epc_unique_id_create)
    return UniqueId(id[])
end

function UniqueId(bytes::AbstractVector{UInt8})
    length(bytes) == UNIQUE_ID_BYTES ||
        throw(ArgumentError("a unique id has $UNIQUE_ID_BYTES bytes, got $(length(bytes))"))
    start = firstindex(bytes)
    return UniqueId(EpcUniqueId(ntuple(i -> bytes[start + i - 1], UNIQUE_ID_BYTES)))
end

"""
    UniqueId(hex::AbstractString)

The id whose bytes `hex(id)` wrote (256 hexadecimal digits).
"""
UniqueId(hex::AbstractString) = UniqueId(hex2bytes(String(hex)))

"The id's bytes, a new `Vector{UInt8}` of length 128."
bytes(id::UniqueId) = collect(id.raw.bytes)

"The id's bytes as 256 lower-case hexadecimal digits."
hex(id::UniqueId) = bytes2hex(bytes(id))

Base.show(io::IO, id::UniqueId) = print(io, "UniqueId(\"", hex(id)[1:16], "...\")")
