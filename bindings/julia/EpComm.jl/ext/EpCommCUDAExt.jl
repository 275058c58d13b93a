# SPDX-License-Identifier: Apache-2.0
"""
    EpCommCUDAExt

EpComm with CUDA.jl: `Tensor(a::CuArray)` and CUDA.jl streams for the C ABI. Loaded by Julia
when both EpComm and CUDA are (package extension, Julia >= 1.9).

With it, `CuArray`s go straight into every call that takes tensors (`Handle`, `update!`,
`dispatch`, `combine`: each tensor keyword passes through `Tensor`), and `CuStream`s into
every `stream` keyword. bf16 data kept as `UInt16` is passed as `Tensor(a; dtype = :bf16)`.
CUDA.jl queues its work on the task's stream (`CUDA.stream()`), not on the legacy default
stream, so the extension makes `CUDA.stream()` the default of every `stream` keyword
(`EpComm.default_stream()`); pass `stream = nothing` for the legacy default stream.

Make the communicator's device current in CUDA.jl too (`CUDA.device!(rank_device)`), so that
arrays and streams live on the device the group uses.
"""
module EpCommCUDAExt

using EpComm
using CUDA

"""
    EpComm.Tensor(a::CuArray{T,N}; dtype = T)   (N <= 4; also strided views of a CuArray)

Describe `a`'s device memory in the C ABI's row-major convention: the C shape is
`reverse(size(a))` and the C strides are `reverse(strides(a))`, in elements (see
`EpComm.column_major_tensor` for why). A `(hidden, tokens)` matrix is the C `[tokens, hidden]`
tensor. `dtype` comes from `T` (Float16, Float32, Int32, Int64, a BFloat16 type) or is named,
e.g. `dtype = :bf16` for bf16 data stored as `UInt16`, `:fp8_e4m3` for `UInt8`. The descriptor
keeps `a` alive; stream-ordered work that uses it must still finish before `a` is freed.
"""
function EpComm.Tensor(a::CUDA.StridedCuArray{T,N}; dtype = T) where {T,N}
    N <= EpComm.MAX_DIMS ||
        throw(ArgumentError("a tensor has at most $(EpComm.MAX_DIMS) dimensions, got $N"))
    data = Ptr{Cvoid}(UInt(pointer(a)))  # a device address: CuPtr -> the C ABI's void*
    return EpComm.column_major_tensor(data, dtype, size(a), strides(a), a)
end

"""
    EpComm.to_tensor(a::CuArray)

What `Handle`, `update!`, `dispatch` and `combine` do with a `CuArray` argument: `Tensor(a)`, which keeps `a` referenced (the handle holds its latest call's
tensors).
"""
EpComm.to_tensor(a::CUDA.StridedCuArray) = EpComm.Tensor(a)

"The `cudaStream_t` of a CUDA.jl stream, e.g. `barrier(group; stream = CUDA.stream())`."
EpComm.stream_pointer(stream::CuStream) =
    convert(Ptr{Cvoid}, Base.unsafe_convert(CUDA.CUstream, stream))

# The default of every `stream` keyword: the task's stream, on which CUDA.jl queues its work.
function __init__()
    EpComm.stream_provider[] = CUDA.stream
    return nothing
end

end # module EpCommCUDAExt
