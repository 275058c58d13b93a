# SPDX-License-Identifier: Apache-2.0
"""Turning Python objects that stand for C handles (streams, communicators) into addresses,
and finding the stream a call runs on when the caller gave none."""

import ctypes
import sys
from typing import Any, Iterable, Optional, Tuple

from .errors import StreamRequiredError


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
    """The cudaStream_t behind `stream`: None or 0 (NULL, the legacy default stream), an int
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


def framework_stream(objects: Iterable[Any]) -> Optional[Tuple[str, int]]:
    """The current stream of the first CUDA tensor in `objects` that says which: a torch
    tensor on a CUDA device gives ("torch", torch.cuda.current_stream(its device)), a CuPy
    array ("cupy", CuPy's current stream of its device). None when no object is one (None
    entries, host memory, raw EpcTensors and other producers are skipped). Imports neither
    framework: an object can only be a torch tensor when torch is already imported."""
    torch = sys.modules.get("torch")
    cupy = sys.modules.get("cupy")
    for obj in objects:
        if obj is None:
            continue
        if torch is not None and isinstance(obj, torch.Tensor):
            if obj.device.type == "cuda":
                return "torch", int(torch.cuda.current_stream(obj.device).cuda_stream)
            continue
        if cupy is not None and isinstance(obj, cupy.ndarray):
            return "cupy", int(_cupy_current_stream(cupy, obj.device.id).ptr)
    return None


def _cupy_current_stream(cupy: Any, device_id: int) -> Any:
    try:
        return cupy.cuda.get_current_stream(device_id)
    except TypeError:  # CuPy before 10 takes no device: the current device's stream
        with cupy.cuda.Device(device_id):
            return cupy.cuda.get_current_stream()


def resolve_stream(stream: Any, objects: Iterable[Any], what: str) -> Optional[int]:
    """The cudaStream_t a stream-ordered call runs on: `stream` when given (stream=0: the
    legacy default stream, NULL), else the current torch or CuPy stream of `objects`'
    device (framework_stream). Raises StreamRequiredError naming `what` when stream is
    None and the objects do not say: never the legacy default stream by accident."""
    if stream is not None:
        return stream_address(stream)
    found = framework_stream(objects)
    if found is None:
        raise StreamRequiredError(
            f"{what}: stream=None, and no torch or CuPy CUDA tensor among the arguments "
            "says which stream is current; pass stream= explicitly (a cudaStream_t int, a "
            "torch/CuPy/numba stream or any object with __cuda_stream__; stream=0 is the "
            "legacy default stream)"
        )
    return found[1] or None
