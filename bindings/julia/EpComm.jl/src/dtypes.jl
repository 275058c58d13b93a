# SPDX-License-Identifier: Apache-2.0
# Element types: Julia types (or names) -> the C ABI's EpcDtype codes.

"""
    dtype_code(x) -> EpcDtype

The epcomm dtype of `x`: a Julia element type (`Float16`, `Float32`, `Int32`, `Int64`, or a
2-byte type named `BFloat16`, e.g. from BFloat16s.jl or `Core.BFloat16`), a name (`:bf16`,
`:fp16`, `:fp32`, `:fp8_e4m3`, `:int32`, `:int64`) or a code (`LibEpComm.EPC_DTYPE_*`).

Julia has no bfloat16 or fp8 in its standard library: bf16 data stored as `UInt16` and fp8
data stored as `UInt8` are described by naming the dtype, e.g. `Tensor(a; dtype = :bf16)`.
"""
dtype_code(code::Integer) = EpcDtype(code)
dtype_code(::Type{Float16}) = EPC_DTYPE_FP16
dtype_code(::Type{Float32}) = EPC_DTYPE_FP32
dtype_code(::Type{Int32}) = EPC_DTYPE_INT32
dtype_code(::Type{Int64}) = EPC_DTYPE_INT64

function dtype_code(::Type{T}) where {T}
    if T isa DataType && isbitstype(T) && sizeof(T) == 2 && nameof(T) === :BFloat16
        return EPC_DTYPE_BF16
    end
    throw(ArgumentError("no epcomm dtype for the Julia type $T; name it instead, e.g. " *
                        "dtype = :bf16 for bf16 data stored as UInt16"))
end

const DTYPE_NAMES = Dict(:bf16 => EPC_DTYPE_BF16, :fp16 => EPC_DTYPE_FP16,
                         :fp32 => EPC_DTYPE_FP32, :fp8_e4m3 => EPC_DTYPE_FP8_E4M3,
                         :int32 => EPC_DTYPE_INT32, :int64 => EPC_DTYPE_INT64)

function dtype_code(name::Symbol)
    haskey(DTYPE_NAMES, name) && return DTYPE_NAMES[name]
    throw(ArgumentError("unknown dtype :$name (known: $(join(sort!(collect(keys(DTYPE_NAMES))), ", ")))"))
end
