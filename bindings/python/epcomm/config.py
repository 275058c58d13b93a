# SPDX-License-Identifier: Apache-2.0
"""GroupConfig: what a group carries, as a dataclass that becomes an EpcGroupConfig.

Zero (the default of every field) means "the library's default", exactly as in C;
to_struct() fills struct_size and abi_version and checks that every value fits its C
field, so nothing is silently truncated.
"""

import ctypes
import dataclasses
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from . import _ffi
from ._handles import address
from .enums import Mode, parse_dtype
from .errors import EpcError, Status

_UINT32_MAX = (1 << 32) - 1

# EpcGroupConfig fields that are not plain uint32 settings.
HEADER_FIELDS = ("struct_size", "abi_version")
RESERVED_PREFIX = "reserved"
ALLOCATOR_FIELDS = ("alloc_fn", "free_fn", "alloc_ctx")


@dataclass
class GroupConfig:
    """Configuration of a group (EpcGroupConfig). Every field's 0 means the default.

    num_experts: total experts, divisible by the rank count (required).
    hidden: channels per token (required; a multiple of 8, of 128 for FP8_E4M3).
    mode: Mode.LOW_LATENCY (default) or Mode.HIGH_THROUGHPUT.
    max_tokens_per_rank: 0 = 128 (LL) or 4096 (HT).
    max_topk: 0 = 8; at most 32.
    dtype: payload dtype (Dtype, int or a name such as "bf16"); 0 = BF16.
    num_sms: SM budget; 0 = the mode's default.
    timeout_ms: bound on every device-side wait; 0 = 10000.
    flags: reserved, must be 0.
    alloc_fn, free_fn, alloc_ctx: an optional symmetric-memory allocator (set both
      functions or neither). Each function may be a C function address (int), a ctypes
      _ffi.EpcAllocFn/_ffi.EpcFreeFn, or a Python callable
      `alloc_fn(ctx, nbytes) -> address` / `free_fn(ctx, address)`; an exception in a
      Python alloc_fn is reported to the library as a failed allocation. The memory must
      be registrable as an NCCL window (ncclMemAlloc or CUDA VMM). The callbacks run on
      the thread that creates the group, and the Group keeps them alive until it is
      closed.
    virtual_node_size: a testing and tuning aid (ABI 1.3). 0 = a node is an NVLink (LSA)
      team. Otherwise every LSA team is split into virtual nodes of this many consecutive
      ranks (it must divide the team size): ranks in different virtual nodes then exchange
      data only through the network transport (between virtual nodes an NVLink-backed
      stand-in with the network's ordering rules), never through direct NVLink stores, so
      one host runs the code paths of a multi-node group. GroupInfo.node and num_nodes
      then count virtual nodes, and the plan gains a RegionKind.NET_STAGING region. A
      library older than ABI 1.3 has no such field: plan_query and Group.create raise
      EpcError(UNSUPPORTED) for a non-zero value there, without calling it.
    """

    num_experts: int = 0
    hidden: int = 0
    mode: Union[Mode, int] = 0
    max_tokens_per_rank: int = 0
    max_topk: int = 0
    dtype: Any = 0
    num_sms: int = 0
    timeout_ms: int = 0
    flags: int = 0
    alloc_fn: Optional[Union[int, Callable]] = None
    free_fn: Optional[Union[int, Callable]] = None
    alloc_ctx: Optional[int] = None
    virtual_node_size: int = 0  # last, so that positional arguments keep their meaning

    def to_struct(self) -> "_ffi.EpcGroupConfig":
        """The C struct, with struct_size = sizeof(EpcGroupConfig) and abi_version =
        EPC_ABI_VERSION. Raises ValueError naming a field whose value does not fit."""
        out = _ffi.EpcGroupConfig()
        out.struct_size = ctypes.sizeof(out)
        out.abi_version = _ffi.EPC_ABI_VERSION
        for name in numeric_fields():
            value = getattr(self, name)
            if name == "dtype":
                value = parse_dtype(value)
            setattr(out, name, _uint32(name, value))
        if (self.alloc_fn is None) != (self.free_fn is None):
            raise ValueError("GroupConfig: set both alloc_fn and free_fn, or neither")
        if self.alloc_fn is not None:
            out.alloc_fn = _alloc_function(self.alloc_fn)
            out.free_fn = _free_function(self.free_fn)
        out.alloc_ctx = address(self.alloc_ctx, "GroupConfig.alloc_ctx")
        return out


# The first ABI whose EpcGroupConfig has virtual_node_size (reserved0 before, which had to be 0).
VIRTUAL_NODES_ABI = (1, 3, 0)


def check_supported(struct: "_ffi.EpcGroupConfig", library_version) -> None:
    """Refuse a setting that a library of ABI `library_version` (major, minor, patch)
    cannot read: a field newer than that library, which it takes for a reserved field that
    must be 0. Raises EpcError(UNSUPPORTED)."""
    if struct.virtual_node_size and tuple(library_version) < VIRTUAL_NODES_ABI:
        have = ".".join(str(part) for part in library_version)
        need = ".".join(str(part) for part in VIRTUAL_NODES_ABI)
        raise EpcError(
            Status.UNSUPPORTED,
            f"GroupConfig.virtual_node_size ({struct.virtual_node_size}) needs "
            f"libepcomm ABI {need} or newer, but the loaded library implements ABI "
            f"{have}, which has no virtual nodes; leave it 0 there",
        )


def numeric_fields():
    """The GroupConfig fields that are plain uint32 values of EpcGroupConfig."""
    return [f.name for f in dataclasses.fields(GroupConfig) if f.name not in ALLOCATOR_FIELDS]


def unexposed_struct_fields():
    """EpcGroupConfig fields GroupConfig has no field for, other than the struct header and
    reserved ones: empty unless the header grew and this module was not updated."""
    exposed = {f.name for f in dataclasses.fields(GroupConfig)}
    return [
        name
        for name, _ in _ffi.EpcGroupConfig._fields_
        if name not in exposed and name not in HEADER_FIELDS and not name.startswith(RESERVED_PREFIX)
    ]


def _uint32(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"GroupConfig.{name} must be an int, not {type(value).__name__}")
    if not 0 <= value <= _UINT32_MAX:
        raise ValueError(
            f"GroupConfig.{name} is {value}; it must fit a uint32 (0..{_UINT32_MAX}), 0 meaning the default"
        )
    return int(value)


def _alloc_function(fn: Any) -> "_ffi.EpcAllocFn":
    if isinstance(fn, _ffi.EpcAllocFn):
        return fn
    if isinstance(fn, int):
        return _ffi.EpcAllocFn(fn)
    if not callable(fn):
        raise TypeError("GroupConfig.alloc_fn must be a function address, an EpcAllocFn or a callable")

    def trampoline(ctx, nbytes, out_ptr):
        try:
            pointer = address(fn(ctx, nbytes), "alloc_fn's result")
            if not pointer:
                return 1
            out_ptr[0] = pointer
            return 0
        except BaseException:  # noqa: BLE001 (must not unwind into C)
            sys.unraisablehook(_unraisable("epcomm GroupConfig.alloc_fn raised", fn))
            return 1

    return _ffi.EpcAllocFn(trampoline)


def _free_function(fn: Any) -> "_ffi.EpcFreeFn":
    if isinstance(fn, _ffi.EpcFreeFn):
        return fn
    if isinstance(fn, int):
        return _ffi.EpcFreeFn(fn)
    if not callable(fn):
        raise TypeError("GroupConfig.free_fn must be a function address, an EpcFreeFn or a callable")

    def trampoline(ctx, pointer):
        try:
            fn(ctx, pointer)
        except BaseException:  # noqa: BLE001 (must not unwind into C)
            sys.unraisablehook(_unraisable("epcomm GroupConfig.free_fn raised", fn))

    return _ffi.EpcFreeFn(trampoline)


def _unraisable(message: str, obj: Any) -> types.SimpleNamespace:
    """The argument sys.unraisablehook takes, for the exception being handled."""
    exc_type, exc_value, exc_traceback = sys.exc_info()
    return types.SimpleNamespace(
        exc_type=exc_type, exc_value=exc_value, exc_traceback=exc_traceback, err_msg=message, object=obj
    )
