# SPDX-License-Identifier: Apache-2.0
"""Turning Python objects that stand for C handles (streams, communicators) into addresses."""

import ctypes
from typing import Any, Optional


def address(value: Any, what: str) -> Optional[int]:
    """None -> None (NULL); an int, ctypes.c_void_p or ctypes pointer -> its address.
    Anything else raises TypeError naming `what`."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a pointer (an int address), not a bool")
    if isinstance(value, int):
        if value < 0 or value >= 1 << (8 * ctypes.sizeof(ctypes.c_void_p)):
            raise ValueError(f"{what} {value:#x} is not a valid address")
        return value or None
    if isinstance(value, ctypes.c_void_p):
        return value.value
    if isinstance(value, ctypes._Pointer):  # noqa: SLF001 (the ctypes pointer base class)
        return ctypes.cast(value, ctypes.c_void_p).value
    raise TypeError(f"{what} must be an int address or a ctypes pointer, not {type(value).__name__}")


def stream_address(stream: Any) -> Optional[int]:
    """The cudaStream_t behind `stream`: None or 0 (the legacy default stream), an int
    address, an object with the CUDA stream protocol (`__cuda_stream__()` -> (version,
    handle)), a torch.cuda.Stream (`.cuda_stream`), a CuPy stream (`.ptr`) or a numba
    stream (`.handle`)."""
    if stream is None or isinstance(stream, (int, ctypes.c_void_p, ctypes._Pointer)):
        return address(stream, "stream")
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        _version, handle = protocol()
        return address(handle, "stream")
    for attribute in ("cuda_stream", "ptr", "handle"):
        if hasattr(stream, attribute):
            return address(getattr(stream, attribute), f"stream.{attribute}")
    raise TypeError(
        f"cannot find the cudaStream_t of a {type(stream).__name__}: pass None, "
        "an int, or a stream object with __cuda_stream__, .cuda_stream, .ptr or "
        ".handle"
    )
