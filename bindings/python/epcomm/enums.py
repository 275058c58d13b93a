# SPDX-License-Identifier: Apache-2.0
"""The header's named constants as IntEnums: Dtype, Mode, RegionKind, HtSizing.

Members are built from the generated constants by prefix (EPC_DTYPE_*, EPC_MODE_*,
EPC_REGION_*, EPC_HT_SIZING_*), so a constant added to the header appears here after
regeneration. Values read back from the library that this binding does not know stay plain
ints (see `known_or_int`): the C ABI may grow within a major version.
"""

import enum
from typing import Any, Dict, Type, TypeVar, Union

from . import _ffi

E = TypeVar("E", bound=enum.IntEnum)


def _members(prefix: str) -> Dict[str, int]:
    return {
        name[len(prefix) :]: value
        for name, value in vars(_ffi).items()
        if name.startswith(prefix) and isinstance(value, int)
    }


Dtype = enum.IntEnum("Dtype", _members("EPC_DTYPE_"), module=__name__)
Dtype.__doc__ = "Element types of tensors and group payloads (EPC_DTYPE_*)."
Mode = enum.IntEnum("Mode", _members("EPC_MODE_"), module=__name__)
Mode.__doc__ = "Group modes (EPC_MODE_*); 0 in a config means LOW_LATENCY."
RegionKind = enum.IntEnum("RegionKind", _members("EPC_REGION_"), module=__name__)
RegionKind.__doc__ = "What a region of a group's symmetric window holds (EPC_REGION_*)."
HtSizing = enum.IntEnum("HtSizing", _members("EPC_HT_SIZING_"), module=__name__)
HtSizing.__doc__ = (
    "How a high-throughput handle sizes its rows (EPC_HT_SIZING_*): EXACT "
    "(N, learnt with one host sync) or CAPACITY (the worst case, no sync)."
)


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
