# SPDX-License-Identifier: Apache-2.0
"""Status codes and the exceptions epcomm raises.

Every C function returns an EpcStatus; the bindings turn a non-zero one into EpcError (or
the subclass error_class() names for the status: CapacityError, InvalidUsageError),
carrying the calling thread's detail message (epc_last_error), read on the same thread
right after the failing call, before anything else can clear it.
"""

from typing import Any, Optional

from . import _ffi
from ._enums import Status as Status


class EpcError(Exception):
    """A call into epcomm failed.

    `status` is the Status the C function returned, `message` the thread's detail message
    (epc_last_error) captured right after the call, `function` the C function's name when
    the error comes from the library (None for checks the bindings make themselves).
    """

    def __init__(self, status: int, message: str = "", function: Optional[str] = None):
        self.status = Status(status)
        self.message = message
        self.function = function
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"{self.function}: " if self.function else ""
        detail = f": {self.message}" if self.message else ""
        name = self.status.name or f"unknown status {int(self.status)}"
        return f"{where}{name}{detail}"

    def __reduce__(self) -> Any:  # picklable (e.g. across multiprocessing)
        return (type(self), (int(self.status), self.message, self.function))


class InvalidTensorError(EpcError, ValueError):
    """An object cannot be passed as an EpcTensor (CPU memory, an unsupported dtype, more
    than EPC_TENSOR_MAX_DIMS dimensions, a layout the call cannot take...). Raised by the
    bindings before any C call; its status is INVALID_ARGUMENT, and it is a ValueError."""

    def __init__(self, message: str, status: int = _ffi.EPC_ERR_INVALID_ARGUMENT, function: Optional[str] = None):
        super().__init__(status, message, function)

    def __reduce__(self) -> Any:
        return (type(self), (self.message, int(self.status), self.function))


class CapacityError(EpcError):
    """Status CAPACITY: a dispatch received more rows than the handle's capacity under
    Overflow.FAIL. Not sticky: the step's outputs are undefined, the handle's query()
    reports the overflow (rank, rows), and the next step starts afresh."""

    def __init__(self, status: int = _ffi.EPC_ERR_CAPACITY, message: str = "", function: Optional[str] = None):
        super().__init__(status, message, function)


class InvalidUsageError(EpcError):
    """Status INVALID_USAGE: a call out of order: complete() with nothing pending, a step on
    a handle with one pending, a send-only step past the group's max_pending_steps (or while
    pending steps hold every slot of its direction), a step on a handle without routing."""

    def __init__(self, status: int = _ffi.EPC_ERR_INVALID_USAGE, message: str = "", function: Optional[str] = None):
        super().__init__(status, message, function)


class StreamRequiredError(EpcError, ValueError):
    """A stream-ordered call got stream=None and its tensors do not say which stream is
    current (they are neither torch nor CuPy CUDA tensors). Raised by the bindings before
    any C call; pass stream= explicitly (stream=0 is the legacy default stream). Its status
    is INVALID_ARGUMENT, and it is a ValueError."""

    def __init__(self, message: str, status: int = _ffi.EPC_ERR_INVALID_ARGUMENT, function: Optional[str] = None):
        super().__init__(status, message, function)

    def __reduce__(self) -> Any:
        return (type(self), (self.message, int(self.status), self.function))


# The EpcError subclass raised for a status returned by the library.
_ERROR_CLASSES = {_ffi.EPC_ERR_CAPACITY: CapacityError, _ffi.EPC_ERR_INVALID_USAGE: InvalidUsageError}


def error_class(status: int) -> type:
    """The exception class for a failing status: CapacityError, InvalidUsageError, else
    EpcError."""
    return _ERROR_CLASSES.get(int(status), EpcError)


def error_for(status: int, message: str = "", function: Optional[str] = None) -> EpcError:
    """The exception for `status` returned by C function `function` with `message`."""
    error: EpcError = error_class(status)(status, message, function)
    return error
