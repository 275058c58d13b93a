# SPDX-License-Identifier: Apache-2.0
"""The header's named constants as IntEnums and IntFlags: Dtype, Mode, RegionKind, Layout,
Sizing, Quant, ScaleLayout, Weighting, Overflow, Pending, HandleFlags, GroupFlags.

The classes are generated from the header into _enums.py (static, so IDEs and type checkers
see Dtype.BF16); a constant added to the header appears there after regeneration. Values
read back from the library that this binding does not know stay plain ints (see
`known_or_int`): the C ABI may grow within a major version.
"""

import enum
from typing import Any, Dict, Type, TypeVar, Union

from ._enums import (
    Dtype,
    GroupFlags,
    HandleFlags,
    Layout,
    Mode,
    Overflow,
    Pending,
    Quant,
    RegionKind,
    ScaleLayout,
    Sizing,
    Weighting,
)

__all__ = [
    "Dtype",
    "GroupFlags",
    "HandleFlags",
    "Layout",
    "Mode",
    "Overflow",
    "Pending",
    "Quant",
    "RegionKind",
    "ScaleLayout",
    "Sizing",
    "Weighting",
    "DTYPE_ITEMSIZE",
    "dtype_names",
    "known_or_int",
    "parse_dtype",
    "parse_enum",
]

E = TypeVar("E", bound=enum.IntEnum)


def parse_enum(enum_type: Type[E], value: Any, what: str) -> int:
    """The code of `value` for the C field `what`: a member of `enum_type`, an int (a code
    a newer library knows passes through unchanged) or a member's name, case-insensitive
    ("fp8", "Expert_Padded"). Raises ValueError for an unknown name, TypeError otherwise."""
    if isinstance(value, str):
        try:
            return int(enum_type[value.strip().upper()])
        except KeyError:
            names = ", ".join(m.name.lower() for m in enum_type)
            raise ValueError(f"{what}: unknown {enum_type.__name__} {value!r}; expected one of {names}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be a {enum_type.__name__} member, an int or a name, not {type(value).__name__}")
    return int(value)


def known_or_int(enum_type: Type[E], value: int) -> Union[E, int]:
    """`enum_type(value)` if this binding knows the value, else the plain int."""
    try:
        return enum_type(value)
    except ValueError:
        return int(value)


# Bytes per element of each dtype a tensor can have. A dtype added to the header is
# rejected by the tensor conversions until it is listed here.
DTYPE_ITEMSIZE: Dict[int, int] = {
    Dtype.BF16: 2,
    Dtype.FP16: 2,
    Dtype.FP32: 4,
    Dtype.FP8_E4M3: 1,
    Dtype.INT32: 4,
    Dtype.INT64: 8,
    Dtype.UINT8: 1,
    Dtype.FP8_E5M2: 1,
    Dtype.E8M0: 1,
    Dtype.E8M0X4: 4,
    Dtype.FP4_E2M1X2: 1,
}

# Spellings accepted by parse_dtype besides the Dtype member names (case-insensitive):
# torch's, numpy's and ml_dtypes' names.
_DTYPE_ALIASES: Dict[str, int] = {
    "bf16": Dtype.BF16,
    "bfloat16": Dtype.BF16,
    "fp16": Dtype.FP16,
    "float16": Dtype.FP16,
    "half": Dtype.FP16,
    "fp32": Dtype.FP32,
    "float32": Dtype.FP32,
    "fp8": Dtype.FP8_E4M3,
    "fp8_e4m3": Dtype.FP8_E4M3,
    "float8_e4m3fn": Dtype.FP8_E4M3,
    "e4m3": Dtype.FP8_E4M3,
    "int32": Dtype.INT32,
    "int64": Dtype.INT64,
    "uint8": Dtype.UINT8,
    "u8": Dtype.UINT8,
    "fp8_e5m2": Dtype.FP8_E5M2,
    "float8_e5m2": Dtype.FP8_E5M2,
    "e5m2": Dtype.FP8_E5M2,
    "e8m0": Dtype.E8M0,
    "ue8m0": Dtype.E8M0,
    "float8_e8m0fnu": Dtype.E8M0,
    "e8m0x4": Dtype.E8M0X4,
    "fp4_e2m1x2": Dtype.FP4_E2M1X2,
    "float4_e2m1fn_x2": Dtype.FP4_E2M1X2,
    "nvfp4": Dtype.FP4_E2M1X2,
}


def dtype_names() -> str:
    """The supported tensor dtypes, for error messages."""
    return ", ".join(Dtype(d).name.lower() for d in DTYPE_ITEMSIZE)


def parse_dtype(value: Any) -> Union[Dtype, int]:
    """A Dtype from a Dtype, an int code, a name ("bf16", "bfloat16", "fp8_e4m3"...), or a
    torch/numpy dtype object (by its name: torch.bfloat16, numpy.dtype("float16")).
    Raises ValueError naming the value when it is none of those."""
    if isinstance(value, Dtype):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return known_or_int(Dtype, value)
    if isinstance(value, str):
        text = value
    else:  # torch.dtype prints as "torch.bfloat16"; numpy dtypes have .name
        text = getattr(value, "name", None) or str(value)
    key = text.strip().lower().rsplit(".", 1)[-1]
    if key in _DTYPE_ALIASES:
        return Dtype(_DTYPE_ALIASES[key])
    if key.upper() in Dtype.__members__:
        return Dtype[key.upper()]
    raise ValueError(f"unknown dtype {value!r}; epcomm dtypes are {dtype_names()}")
