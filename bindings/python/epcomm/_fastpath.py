# SPDX-License-Identifier: Apache-2.0
"""The per-call fast path: argument structs and tensor descriptors built once and refilled in
place, and C functions called through prototypes that take plain int addresses.

Standard library only (epcomm.torch fills the descriptors from torch tensors). One
`Descriptor` is one `EpcTensor` the library reads; `fill` rewrites it with one
`struct.pack_into` (data, dtype, ndim, the four extents; the strides stay zero: the fast
path takes contiguous tensors only, which the ABI describes with all-zero strides).
"""

import ctypes
import struct
from typing import Any, Dict, Sequence, Tuple

from . import _ffi
from ._library import library
from .errors import error_for

# data (u64), dtype (u32), ndim (i32), shape[4] (i64): EpcTensor's first 48 bytes.
_TENSOR_HEAD = struct.Struct("<QIi4q")
if (
    _ffi.EpcTensor.dtype.offset != 8
    or _ffi.EpcTensor.ndim.offset != 12
    or _ffi.EpcTensor.shape.offset != 16
    or _ffi.EpcTensor.strides.offset != 48
):
    raise ImportError("epcomm._fastpath: EpcTensor's layout is not the one this module packs")  # pragma: no cover

# Zero extents that pad a shape of n < 4 dimensions to four.
PAD: Tuple[Tuple[int, ...], ...] = tuple((0,) * (4 - n) for n in range(5))

# int epc_*(void*, void*, void*): every stream-ordered step function has this shape.
_STEP = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class Descriptor:
    """One EpcTensor that is refilled in place, at a fixed address."""

    __slots__ = ("struct", "address")

    def __init__(self) -> None:
        self.struct = _ffi.EpcTensor()
        self.address = ctypes.addressof(self.struct)

    def fill(self, data: int, dtype: int, shape: Sequence[int]) -> None:
        """Describe contiguous memory: `shape` has at most EPC_TENSOR_MAX_DIMS extents."""
        n = len(shape)
        _TENSOR_HEAD.pack_into(self.struct, 0, data, dtype, n, *shape, *PAD[n])


class Args:
    """An args struct (EpcDispatchArgs, EpcCombineArgs, EpcRouting) whose tensor fields
    point at their own Descriptors, once and for all but for an optional field a call
    leaves out (`present`)."""

    def __init__(self, struct_type: Any, fields: Sequence[str]):
        self.struct = struct_type()
        self.struct.struct_size = ctypes.sizeof(self.struct)
        self.struct.abi_version = _ffi.EPC_ABI_VERSION
        self.address = ctypes.addressof(self.struct)
        self.tensors: Dict[str, Descriptor] = {}
        self._pointers: Dict[str, Any] = {}
        for name in fields:
            descriptor = Descriptor()
            pointer = ctypes.pointer(descriptor.struct)
            setattr(self.struct, name, pointer)
            self.tensors[name] = descriptor
            self._pointers[name] = pointer

    def present(self, name: str, present: bool) -> None:
        """Point field `name` at its Descriptor, or with `present` False leave it NULL."""
        setattr(self.struct, name, self._pointers[name] if present else None)


class Function:
    """A C step function `int f(handle, args, stream)` called with int addresses; a non-zero
    status raises the binding's EpcError (the thread's message read right after)."""

    __slots__ = ("name", "_raw")

    def __init__(self, name: str):
        self.name = name
        function = library().function(name)
        self._raw = _STEP(ctypes.cast(function, ctypes.c_void_p).value or 0)

    def __call__(self, handle: int, argument: int, stream: int) -> None:
        status = self._raw(handle, argument, stream)
        if status:
            raise error_for(status, library().last_error(), self.name)

    @property
    def address(self) -> int:
        """The C function's address (for C code that calls it directly)."""
        return ctypes.cast(self._raw, ctypes.c_void_p).value or 0
