# SPDX-License-Identifier: Apache-2.0
# Tensor descriptors: device memory described for the C ABI (DLPack's meaning).

const MAX_DIMS = Int(EPC_TENSOR_MAX_DIMS)

"""
    Tensor

A descriptor of device memory (`EpcTensor`) with DLPack's meaning, in C's convention: `size`
and `strides` list the outermost dimension first (row-major), count elements, and all-zero
strides mean contiguous. `owner` is the Julia object that owns the memory (the descriptor
keeps it alive); `nothing` for raw pointers, whose memory the caller keeps alive.

From a raw pointer: `Tensor(ptr::Ptr{T}, (tokens, hidden))` (C order; `dtype` from `T`, or
the `dtype` keyword). From a `CuArray` (with CUDA.jl loaded): `Tensor(a)`, which reverses
Julia's column-major dimensions; see `column_major_tensor`.
"""
struct Tensor
    raw::EpcTensor
    owner::Any
end

"""
    Tensor(data::Ptr{T}, shape; strides = nothing, dtype = T)

Describe `prod(shape)` elements at `data`, `shape` and `strides` in C order (outermost first);
`strides = nothing` means contiguous. An untyped `Ptr{Cvoid}` needs `dtype` (a name such as
`:bf16`, a Julia type, or an `EPC_DTYPE_*` code).
"""
function Tensor(data::Ptr{T}, shape::Tuple{Vararg{Integer}};
                strides::Union{Nothing,Tuple{Vararg{Integer}}} = nothing, dtype = T) where {T}
    return Tensor(c_tensor(convert(Ptr{Cvoid}, data), dtype_code(dtype), shape, strides), nothing)
end

function c_tensor(data::Ptr{Cvoid}, dtype::EpcDtype, shape::Tuple, strides)
    ndim = length(shape)
    ndim <= MAX_DIMS || throw(ArgumentError("a tensor has at most $MAX_DIMS dimensions, got $ndim"))
    all(>=(0), shape) || throw(ArgumentError("negative extent in the shape $shape"))
    strides === nothing || length(strides) == ndim ||
        throw(ArgumentError("shape $shape and strides $strides differ in length"))
    padded(values) = ntuple(i -> i <= ndim ? Int64(values[i]) : Int64(0), MAX_DIMS)
    return c_struct(EpcTensor; data, dtype, ndim,
                    shape = padded(shape),
                    strides = strides === nothing ? padded(ntuple(_ -> 0, ndim)) : padded(strides))
end

"""
    column_major_tensor(data::Ptr{Cvoid}, dtype, dims, strides, owner) -> Tensor

Describe a Julia array's memory (element type `dtype`, Julia's `size` and `strides`) for the
C ABI, whose convention is row-major. Julia stores `A[i_1, ..., i_N]` (column-major, 1-based)
at element offset `sum((i_k - 1) * strides[k] for k in 1:N)`. A C descriptor with shape
`reverse(dims)` and strides `reverse(strides)` stores its element `[j_1, ..., j_N]` (0-based)
at `sum(j_m * strides[N + 1 - m] for m in 1:N)`, which with `j_m = i_(N+1-m) - 1` is the same
offset. So the C shape and strides are Julia's reversed, C index `[i_N - 1, ..., i_1 - 1]` is
Julia's `A[i_1, ..., i_N]`, and Julia's contiguous strides `(1, d_1, d_1 d_2, ...)` become C's
row-major contiguous ones. In practice: a `(hidden, tokens)` Julia matrix, one token per
column, is the C `[tokens, hidden]` layout that the library's calls take.
"""
function column_major_tensor(data::Ptr{Cvoid}, dtype, dims::Tuple, strides::Tuple, owner)
    return Tensor(c_tensor(data, dtype_code(dtype), reverse(dims), reverse(strides)), owner)
end

Base.ndims(tensor::Tensor) = Int(tensor.raw.ndim)
"The C-order shape (outermost dimension first)."
Base.size(tensor::Tensor) = ntuple(i -> Int(tensor.raw.shape[i]), ndims(tensor))
"The C-order strides in elements (all zero: contiguous)."
Base.strides(tensor::Tensor) = ntuple(i -> Int(tensor.raw.strides[i]), ndims(tensor))
Base.pointer(tensor::Tensor) = tensor.raw.data
dtype(tensor::Tensor) = tensor.raw.dtype

"""
    to_tensor(x) -> Tensor

What the stream-ordered calls do with each tensor argument: a [`Tensor`](@ref) as it is,
anything else through `Tensor(x)` (a `CuArray` once CUDA.jl is loaded; bf16 data stored as
`UInt16` needs `Tensor(a; dtype = :bf16)`).
"""
to_tensor(tensor::Tensor) = tensor

function to_tensor(x)
    hasmethod(Tensor, Tuple{typeof(x)}) ||
        throw(ArgumentError("cannot describe a $(typeof(x)) as a Tensor: pass a Tensor " *
                            "(e.g. Tensor(ptr, shape)) or, with CUDA.jl loaded, a CuArray"))
    return Tensor(x)
end
