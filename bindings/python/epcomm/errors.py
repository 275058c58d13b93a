# SPDX-License-Identifier: Apache-2.0
"""Status codes and the exceptions epcomm raises.

Every C function returns an EpcStatus; the bindings turn a non-zero one into EpcError (or
the subclass error_class() names for the status: CapacityError, InvalidUsageError),
carrying the calling thread's detail message (epc_last_error), read on the same thread
right after the failing call, before anything else can clear it.
"""

from typing import Dict, Optional

from . import _ffi


class Status(int):
    """An EpcStatus: an int that also knows its name.

    The named codes (Status.OK, Status.INVALID_ARGUMENT, ...) come from the header's
    EPC_OK/EPC_ERR_* constants. A code this binding does not know (from a newer library)
    stays a Status with its value: `Status(42).name` is None and `repr()` gives
    "Status(42)"; treat it as an error, as the header asks.
    """

    _names: Dict[int, str] = {}

    def __new__(cls, value: int) -> "Status":
        return super().__new__(cls, int(value))

    @property
    def name(self) -> Optional[str]:
        """ "INVALID_ARGUMENT" for EPC_ERR_INVALID_ARGUMENT, "OK" for EPC_OK, None if unknown."""
        return self._names.get(int(self))

    @property
    def ok(self) -> bool:
        return int(self) == _ffi.EPC_OK

    def describe(self) -> str:
        """The library's static English string for this code (epc_status_string):
        "unknown status" for codes the loaded library does not know. Loads the library."""
        from ._library import status_string

        return status_string(self)

    def __repr__(self) -> str:
        name = self.name
        return f"Status.{name}" if name else f"Status({int(self)})"

    __str__ = __repr__


def _install_status_names() -> None:
    for constant, value in vars(_ffi).items():
        if constant == "EPC_OK":
            name = "OK"
        elif constant.startswith("EPC_ERR_"):
            name = constant[len("EPC_ERR_") :]
        else:
            continue
        Status._names[value] = name
        setattr(Status, name, Status(value))


_install_status_names()


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

    def __reduce__(self):  # picklable (e.g. across multiprocessing)
        return (type(self), (int(self.status), self.message, self.function))


class InvalidTensorError(EpcError, ValueError):
    """An object cannot be passed as an EpcTensor (CPU memory, an unsupported dtype, more
    than EPC_TENSOR_MAX_DIMS dimensions, a layout the call cannot take...). Raised by the
    bindings before any C call; its status is INVALID_ARGUMENT, and it is a ValueError."""

    def __init__(self, message: str, status: int = _ffi.EPC_ERR_INVALID_ARGUMENT, function: Optional[str] = None):
        super().__init__(status, message, function)

    def __reduce__(self):
        return (type(self), (self.message, int(self.status), self.function))


class CapacityError(EpcError):
    """Status CAPACITY: a dispatch received more rows than the handle's capacity under
    Overflow.FAIL. Not sticky: the step's outputs are undefined, the handle's query()
    reports the overflow (rank, rows), and the next step starts afresh."""

    def __init__(self, status: int = _ffi.EPC_ERR_CAPACITY, message: str = "", function: Optional[str] = None):
        super().__init__(status, message, function)


class InvalidUsageError(EpcError):
    """Status INVALID_USAGE: a call out of order: complete() with nothing pending, a step on
    a handle with one pending (or while another handle of the group holds the group's only
    pending slot), a step on a handle without routing."""

    def __init__(self, status: int = _ffi.EPC_ERR_INVALID_USAGE, message: str = "", function: Optional[str] = None):
        super().__init__(status, message, function)


class StreamRequiredError(EpcError, ValueError):
    """A stream-ordered call got stream=None and its tensors do not say which stream is
    current (they are neither torch nor CuPy CUDA tensors). Raised by the bindings before
    any C call; pass stream= explicitly (stream=0 is the legacy default stream). Its status
    is INVALID_ARGUMENT, and it is a ValueError."""

    def __init__(self, message: str, status: int = _ffi.EPC_ERR_INVALID_ARGUMENT, function: Optional[str] = None):
        super().__init__(status, message, function)

    def __reduce__(self):
        return (type(self), (self.message, int(self.status), self.function))


# The EpcError subclass raised for a status returned by the library.
_ERROR_CLASSES = {_ffi.EPC_ERR_CAPACITY: CapacityError, _ffi.EPC_ERR_INVALID_USAGE: InvalidUsageError}


def error_class(status: int) -> type:
    """The exception class for a failing status: CapacityError, InvalidUsageError, else
    EpcError."""
    return _ERROR_CLASSES.get(int(status), EpcError)


def error_for(status: int, message: str = "", function: Optional[str] = None) -> EpcError:
    """The exception for `status` returned by C function `function` with `message`."""
    return error_class(status)(status, message, function)
