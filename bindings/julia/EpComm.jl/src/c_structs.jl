# SPDX-License-Identifier: Apache-2.0
# Building and reading the C structs of LibEpComm.

zero_value(::Type{T}) where {T<:Number} = zero(T)
zero_value(::Type{Ptr{T}}) where {T} = convert(Ptr{T}, C_NULL)
zero_value(::Type{NTuple{N,T}}) where {N,T} = ntuple(_ -> zero_value(T), N)
zero_value(::Type{T}) where {T} = c_struct(T)

"""
    c_struct(T; field = value, ...) -> T

The isbits C struct `T` with the named fields set (each converted to its field type, so an
out-of-range value throws) and every other field zero, which the C ABI reads as "default".
Fields are matched by name, so a struct that grows keeps working.
"""
function c_struct(::Type{T}; fields...) where {T}
    isbitstype(T) || throw(ArgumentError("$T is not an isbits C struct"))
    names = fieldnames(T)
    for name in keys(fields)
        name in names || throw(ArgumentError("$T has no field $name"))
    end
    values = ntuple(fieldcount(T)) do i
        haskey(fields, names[i]) ? convert(fieldtype(T, i), fields[names[i]]) :
                                   zero_value(fieldtype(T, i))
    end
    return T(values...)
end

"""
    extensible(T; field = value, ...) -> T

An extensible C struct (one that starts with `struct_size` and `abi_version`): like
[`c_struct`](@ref), with `struct_size = sizeof(T)` and `abi_version = EPC_ABI_VERSION`.
"""
extensible(::Type{T}; fields...) where {T} =
    c_struct(T; struct_size = sizeof(T), abi_version = EPC_ABI_VERSION, fields...)

"The text of a NUL-terminated C `char` array field."
function c_string(bytes::NTuple{N,UInt8}) where {N}
    stop = N
    for i in 1:N
        if bytes[i] == 0x00
            stop = i - 1
            break
        end
    end
    return String(UInt8[bytes[i] for i in 1:stop])
end
