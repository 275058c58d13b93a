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
from typing import Any, Callable, List, Optional, Union

from . import _ffi
from ._handles import address
from .enums import Mode, Overflow, parse_enum

# EpcGroupConfig fields that are not plain uint32 settings.
HEADER_FIELDS = ("struct_size", "abi_version")
RESERVED_PREFIX = "reserved"
ALLOCATOR_FIELDS = ("alloc_fn", "free_fn", "alloc_ctx")


@dataclass
class GroupConfig:
    """Configuration of a group (EpcGroupConfig 2.0). Every field's 0 means the default.

    num_experts: total experts, divisible by the rank count (required).
    hidden: channels per token, H (required; a multiple of 8).
    mode: Mode.LOW_LATENCY (0, the default) or Mode.HIGH_THROUGHPUT.
    max_tokens_per_rank: T; 0 = 128 (LL) or 4096 (HT); at most 1024 (LL), 65536 (HT).
    max_topk: bound on K; 0 = 8; at most 32.
    max_token_bytes: dispatch bytes per token the window holds, payload plus scales; 0 =
      2 * H (bf16 or fp16 payloads; fp8 fits too). Down to H + H / 32 (H a multiple of
      128): a window for fp8 payloads with one fp32 scale per 128 channels only (1.3's
      dtype=fp8_e4m3 group). Rounded down to one of those two sizes (GroupInfo says which).
    recv_capacity: tokens per rank the receive window holds; 0 = R * T, which never
      overflows (fewer: UNSUPPORTED in 2.0; served since 2.1 on HT groups, of one node or
      several, to FLAT handles).
    overflow: Overflow.FAIL (0) or Overflow.DROP: what a step does past a capacity.
    max_pending_steps: send-only steps awaiting complete() at once over all the group's
      handles, one per handle; 0 = 2 (since 2.1); up to 3 (more: UNSUPPORTED), each above 2
      adding a receive slot per direction on LL groups.
    num_sms: SM budget; 0 = 132 (LL) or 24 (HT).
    timeout_ms: bound on every device-side wait; 0 = 10000.
    flags: GroupFlags (GroupFlags.COMBINE_PER_ENTRY: UNSUPPORTED in 2.0; served since 2.1
      for Weighting.HOME, on LL and HT groups of any number of nodes).
    virtual_node_size: a testing and tuning aid. 0 = a node is an NVLink (LSA) team.
      Otherwise every LSA team is split into virtual nodes of this many consecutive ranks
      (it must divide the team size): ranks in different virtual nodes then exchange data
      only through the network transport (between virtual nodes an NVLink-backed stand-in
      with the network's ordering rules), so one host runs the code paths of a multi-node
      group. GroupInfo.node and num_nodes then count virtual nodes, and the plan gains a
      RegionKind.NET_STAGING region.
    alloc_fn, free_fn, alloc_ctx: an optional symmetric-memory allocator (set both
      functions or neither). Each function may be a C function address (int), a ctypes
      _ffi.EpcAllocFn/_ffi.EpcFreeFn, or a Python callable
      `alloc_fn(ctx, nbytes) -> address` / `free_fn(ctx, address)`; an exception in a
      Python alloc_fn is reported to the library as a failed allocation. The memory must
      be registrable as an NCCL window (ncclMemAlloc or CUDA VMM). The callbacks run on
      the thread that creates the group, and the Group keeps them alive until it is
      closed.

    mode and overflow also take names ("high_throughput", "drop"). Fields are in the
    header's order; pass them by keyword.
    """

    num_experts: int = 0
    hidden: int = 0
    mode: Union[Mode, int, str] = 0
    max_tokens_per_rank: int = 0
    max_topk: int = 0
    max_token_bytes: int = 0
    recv_capacity: int = 0
    overflow: Union[Overflow, int, str] = 0
    max_pending_steps: int = 0
    num_sms: int = 0
    timeout_ms: int = 0
    flags: int = 0
    virtual_node_size: int = 0
    alloc_fn: Optional[Union[int, Callable[..., Any]]] = None
    free_fn: Optional[Union[int, Callable[..., Any]]] = None
    alloc_ctx: Optional[int] = None

    def to_struct(self) -> "_ffi.EpcGroupConfig":
        """The C struct, with struct_size = sizeof(EpcGroupConfig) and abi_version =
        EPC_ABI_VERSION. Raises ValueError naming a field whose value does not fit."""
        out = _ffi.EpcGroupConfig()
        out.struct_size = ctypes.sizeof(out)
        out.abi_version = _ffi.EPC_ABI_VERSION
        for name in numeric_fields():
            value = getattr(self, name)
            if name in _ENUM_FIELDS:
                value = parse_enum(_ENUM_FIELDS[name], value, f"GroupConfig.{name}")
            setattr(out, name, unsigned(f"GroupConfig.{name}", value, field_bits(_ffi.EpcGroupConfig, name)))
        if (self.alloc_fn is None) != (self.free_fn is None):
            raise ValueError("GroupConfig: set both alloc_fn and free_fn, or neither")
        if self.alloc_fn is not None:
            out.alloc_fn = _alloc_function(self.alloc_fn)
            out.free_fn = _free_function(self.free_fn)
        out.alloc_ctx = address(self.alloc_ctx, "GroupConfig.alloc_ctx")
        return out


# GroupConfig fields that take an enum member, an int or a name.
_ENUM_FIELDS = {"mode": Mode, "overflow": Overflow}


def numeric_fields() -> List[str]:
    """The GroupConfig fields that are plain unsigned values of EpcGroupConfig."""
    return [f.name for f in dataclasses.fields(GroupConfig) if f.name not in ALLOCATOR_FIELDS]


def unexposed_struct_fields() -> List[str]:
    """EpcGroupConfig fields GroupConfig has no field for, other than the struct header and
    reserved ones: empty unless the header grew and this module was not updated."""
    exposed = {f.name for f in dataclasses.fields(GroupConfig)}
    return [
        name
        for name in (f[0] for f in _ffi.EpcGroupConfig._fields_)
        if name not in exposed and name not in HEADER_FIELDS and not name.startswith(RESERVED_PREFIX)
    ]


def field_bits(struct_type: Any, name: str) -> int:
    """Bits of the unsigned integer field `name` of a ctypes struct type."""
    return 8 * int(getattr(struct_type, name).size)


def unsigned(what: str, value: Any, bits: int = 32) -> int:
    """`value` as an unsigned C value of `bits` bits; TypeError or ValueError naming `what`
    when it is not an int or does not fit (nothing is silently truncated)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    top = (1 << bits) - 1
    if not 0 <= value <= top:
        raise ValueError(f"{what} is {value}; it must fit a uint{bits} (0..{top}), 0 meaning the default")
    return int(value)


def _alloc_function(fn: Any) -> Any:
    if isinstance(fn, _ffi.EpcAllocFn):
        return fn
    if isinstance(fn, int):
        return _ffi.EpcAllocFn(fn)
    if not callable(fn):
        raise TypeError("GroupConfig.alloc_fn must be a function address, an EpcAllocFn or a callable")

    def trampoline(ctx: Any, nbytes: Any, out_ptr: Any) -> int:
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


def _free_function(fn: Any) -> Any:
    if isinstance(fn, _ffi.EpcFreeFn):
        return fn
    if isinstance(fn, int):
        return _ffi.EpcFreeFn(fn)
    if not callable(fn):
        raise TypeError("GroupConfig.free_fn must be a function address, an EpcFreeFn or a callable")

    def trampoline(ctx: Any, pointer: Any) -> None:
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
