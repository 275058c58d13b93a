# SPDX-License-Identifier: Apache-2.0
# Errors: an epcomm call that fails throws EpcError with the library's message for it.

"""
    EpcError(status, func, message)

An epcomm C call failed. `status` is its `EpcStatus` (compare with `LibEpComm.EPC_ERR_*`),
`func` the C function, `message` the detail the library recorded for this failure
(`epc_last_error`), possibly empty.

The detail message is per OS thread and every epcomm call resets it, so it is fetched right
after the failing call, on the same thread: the call and the fetch sit in one function with no
yield point between them (no I/O, lock, `sleep`, `yield` or `wait`), so the task cannot
migrate to another thread in between, and finalizers are disabled while the message is copied,
so that no finalizer's epcomm call can reset it. (EpComm's own finalizers make no C calls.)
"""
struct EpcError <: Exception
    status::EpcStatus
    func::Symbol
    message::String
end

function Base.showerror(io::IO, error::EpcError)
    print(io, "EpcError: ", error.func, " failed: ", status_string(error.status),
          " (status ", error.status, ")")
    isempty(error.message) || print(io, ": ", error.message)
end

"""
    status_string(status) -> String

The library's static name of `status` ("unknown status" for codes it does not know). Local,
thread-safe; does not touch the last-error message.
"""
status_string(status::Integer) = unsafe_string(epc_status_string(status))

"""
    check(status, func)

Return if `status` is `EPC_OK`; else throw [`EpcError`](@ref) with the calling thread's last
error message. Call it directly on the C call's result, `check(epc_x(...), :epc_x)`, so that
nothing runs between the failing call and the fetch (see `EpcError`).
"""
@inline function check(status::EpcStatus, func::Symbol)
    status == EPC_OK && return nothing
    throw_last_error(status, func)
end

@noinline function throw_last_error(status::EpcStatus, func::Symbol)
    GC.enable_finalizers(false)
    message = try
        last_error_message()
    finally
        GC.enable_finalizers(true)
    end
    throw(EpcError(status, func, message))
end

"""
    last_error_message() -> String

The calling thread's epcomm error message: empty after a successful call. Local, thread-safe.
"""
function last_error_message()
    needed = Ref{Csize_t}(0)
    epc_last_error(C_NULL, 0, needed)            # its length, without the NUL
    buffer = Vector{UInt8}(undef, needed[] + 1)
    epc_last_error(buffer, length(buffer), needed)
    return String(resize!(buffer, min(needed[], length(buffer) - 1)))
end
