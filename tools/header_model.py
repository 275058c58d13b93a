# SPDX-License-Identifier: Apache-2.0
"""The model of epcomm.h that the parser builds (Header and the declarations it holds), and
HeaderError, which every part of the parser raises for what it does not understand."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


class HeaderError(Exception):
    """Something in the header this parser does not understand (or that is malformed)."""

    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line
        self.message = message


@dataclass
class Include:
    name: str
    system: bool  # <name> rather than "name"
    active: bool  # False when inside a conditional branch the C view does not take
    line: int


@dataclass
class Macro:
    """An object-like macro that is not an integer constant."""

    name: str
    kind: str  # "empty" (guards, attribute placeholders), "attribute", "initializer"
    body: str
    line: int
    params: Optional[List[str]] = None  # a function-like initializer template's parameters


@dataclass
class Constant:
    name: str
    value: int  # evaluated by this parser; abi_dump cross-checks it with the compiler
    expr: str  # the macro body as written
    line: int


@dataclass
class Param:
    name: Optional[str]
    type: str


@dataclass
class FunctionType:
    return_type: str
    params: List[Param]

    def spelling(self, name: str = "") -> str:
        """C spelling of a pointer to this function type, e.g. `int32_t (*)(void*)`."""
        params = ", ".join(p.type for p in self.params) or "void"
        return f"{self.return_type} (*{name})({params})"


@dataclass
class Field:
    name: str
    type: str  # element type for arrays; the pointer spelling for function pointers
    array_length: Optional[int]
    array_expr: Optional[str]  # the length as written, e.g. "EPC_TENSOR_MAX_DIMS"
    function: Optional[FunctionType]
    line: int

    @property
    def c_type(self) -> str:
        if self.array_length is not None:
            return f"{self.type}[{self.array_length}]"
        return self.type


@dataclass
class Struct:
    name: str
    fields: List[Field]
    line: int


@dataclass
class Typedef:
    name: str
    kind: str  # "alias", "function_pointer", "opaque", "struct"
    target: Optional[str]  # the aliased type for "alias"; the pointer spelling otherwise
    function: Optional[FunctionType]
    line: int


@dataclass
class Function:
    name: str
    return_type: str
    params: List[Param]
    line: int
    doc: Optional[str] = None  # the comment ending on the line above, without /* */ and the
    #                            leading "*" of its lines; None when there is none


@dataclass
class Header:
    path: str
    includes: List[Include] = field(default_factory=list)
    macros: Dict[str, Macro] = field(default_factory=dict)
    constants: Dict[str, Constant] = field(default_factory=dict)
    typedefs: Dict[str, Typedef] = field(default_factory=dict)
    structs: Dict[str, Struct] = field(default_factory=dict)
    functions: Dict[str, Function] = field(default_factory=dict)

    def abi_version(self) -> Tuple[int, int, int]:
        """EPC_ABI_MAJOR/MINOR/PATCH, the single source of truth for the version."""
        try:
            return tuple(self.constants[f"EPC_ABI_{part}"].value for part in ("MAJOR", "MINOR", "PATCH"))  # type: ignore[return-value]
        except KeyError as missing:
            raise HeaderError(self.path, 1, f"the header does not define {missing.args[0]}")

    def abi_version_string(self) -> str:
        return ".".join(str(part) for part in self.abi_version())

    def to_json(self) -> dict:
        return dataclasses.asdict(self)
