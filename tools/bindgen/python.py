# SPDX-License-Identifier: Apache-2.0
"""Python backend of the binding generator: ctypes declarations for epcomm.h.

Renders bindings/python/epcomm/_ffi.py from tools/epcomm_header.py's model of the header:

  - every integer constant (`EPC_*`) as a module-level int;
  - every typedef: scalar aliases (`EpcStatus = ctypes.c_int32`), function-pointer types as
    `ctypes.CFUNCTYPE(...)`, opaque structs as empty `ctypes.Structure` subclasses (only
    pointers to them are ever used) and complete structs as `ctypes.Structure` subclasses
    with their exact `_fields_` (fixed arrays as `T * N`, function-pointer fields as
    CFUNCTYPE types, pointers as `ctypes.POINTER(T)` or `ctypes.c_void_p`);
  - PROTOTYPES, a table `name -> (restype, [argtypes])` of every EPC_API function, and
    `bind(cdll)`, which applies it to a loaded library.

Everything is driven by the model, in header order, so new constants, structs and
functions (dispatch, combine, handles...) appear without touching this file. A C type this
backend cannot express raises BackendError naming it, so --check fails instead of emitting
a wrong declaration.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Tuple

OUTPUTS = ["bindings/python/epcomm/_ffi.py", "bindings/python/epcomm/_enums.py"]

# The static enum classes of _enums.py: (class, constant prefix, base, docstring). Members
# are every header constant with the prefix, in header order, so IDEs and type checkers see
# them (Dtype.BF16) and a constant added to the header appears after regeneration.
ENUMS: List[Tuple[str, str, str, str]] = [
    ("Dtype", "EPC_DTYPE_", "enum.IntEnum", "Element types of tensors (EPC_DTYPE_*)."),
    ("Mode", "EPC_MODE_", "enum.IntEnum", "Group modes (EPC_MODE_*); 0 in a config means LOW_LATENCY."),
    ("RegionKind", "EPC_REGION_", "enum.IntEnum", "What a region of a group's symmetric window holds (EPC_REGION_*)."),
    (
        "Layout",
        "EPC_LAYOUT_",
        "enum.IntEnum",
        "How dispatch lays out what a rank receives (EPC_LAYOUT_*), a property of the handle:\n"
        "    DEFAULT is EXPERT_PADDED on low-latency groups, FLAT on high-throughput ones.",
    ),
    (
        "Sizing",
        "EPC_SIZING_",
        "enum.IntEnum",
        "How a handle's row count is chosen (EPC_SIZING_*): CAPACITY (0, the default: no host\n"
        "    synchronisation, graph-capturable) or EXACT (the rows this rank receives, learnt with\n"
        "    one host synchronisation at create and update).",
    ),
    ("Quant", "EPC_QUANT_", "enum.IntEnum", "How dispatch encodes the payload (EPC_QUANT_*), a property of the call."),
    ("ScaleLayout", "EPC_SCALES_", "enum.IntEnum", "Where dispatch's out_scales elements lie (EPC_SCALES_*)."),
    (
        "Weighting",
        "EPC_WEIGHTING_",
        "enum.IntEnum",
        "How combine weights the expert outputs before it sums them (EPC_WEIGHTING_*).",
    ),
    (
        "Overflow",
        "EPC_OVERFLOW_",
        "enum.IntEnum",
        "What a step does when more rows arrive than a capacity holds (EPC_OVERFLOW_*).",
    ),
    ("Pending", "EPC_PENDING_", "enum.IntEnum", "The send-only call a handle has awaiting complete() (EPC_PENDING_*)."),
    ("HandleFlags", "EPC_HANDLE_", "enum.IntFlag", "EpcHandleConfig.flags bits (EPC_HANDLE_*)."),
    ("GroupFlags", "EPC_GROUP_", "enum.IntFlag", "EpcGroupConfig.flags bits (EPC_GROUP_*)."),
]

# Status is an int, not an enum: a code from a newer library stays a Status with its value.
STATUS_CLASS = '''

class Status(int):
    """An EpcStatus: an int that also knows its name.

    The named codes (Status.OK, Status.INVALID_ARGUMENT, ...) are the header's
    EPC_OK/EPC_ERR_* constants. A code this binding does not know (from a newer library)
    stays a Status with its value: `Status(42).name` is None and `repr()` gives
    "Status(42)"; treat it as an error, as the header asks.
    """

%(annotations)s

    _names: ClassVar[Dict[int, str]] = {
%(names)s
    }

    def __new__(cls, value: int) -> "Status":
        return super().__new__(cls, int(value))

    @property
    def name(self) -> Optional[str]:
        """ "INVALID_ARGUMENT" for EPC_ERR_INVALID_ARGUMENT, "OK" for EPC_OK, None if unknown."""
        return self._names.get(int(self))

    @property
    def ok(self) -> bool:
        return int(self) == 0

    def describe(self) -> str:
        """The library's static English string for this code (epc_status_string):
        "unknown status" for codes the loaded library does not know. Loads the library."""
        from ._library import status_string

        return status_string(self)

    def __repr__(self) -> str:
        name = self.name
        return f"Status.{name}" if name else f"Status({int(self)})"

    __str__ = __repr__


for _value, _name in Status._names.items():
    setattr(Status, _name, Status(_value))
del _value, _name
'''


def render_enums(header) -> str:
    """_enums.py: the static enum classes of ENUMS and Status."""
    constants = list(header.constants.items())
    lines = [
        f"# Generated by tools/bindgen/generate.py from {Path(header.path).name}: do not edit.",
        '"""The header\'s named constants as static enum classes (and Status).',
        "",
        "Generated by tools/bindgen/generate.py (ENUMS in tools/bindgen/python.py): do not edit.",
        "epcomm.enums and epcomm.errors re-export them.",
        '"""',
        "",
        "import enum",
        "from typing import ClassVar, Dict, Optional",
    ]
    for class_name, prefix, base, doc in ENUMS:
        members = [(name[len(prefix) :], c) for name, c in constants if name.startswith(prefix)]
        if not members:
            raise BackendError(f"no header constant starts with {prefix} (enum {class_name})")
        lines += ["", "", f"class {class_name}({base}):", f'    """{doc}"""', ""]
        for member, c in members:
            lines.append(f"    {member} = {constant_literal(c)}")
    status = [("OK", c) for name, c in constants if name == "EPC_OK"]
    status += [(name[len("EPC_ERR_") :], c) for name, c in constants if name.startswith("EPC_ERR_")]
    annotations = "\n".join(f'    {n}: ClassVar["Status"]' for n, _ in status)
    names = "\n".join(f'        {c.value}: "{n}",' for n, c in status)
    text = "\n".join(lines) + "\n" + STATUS_CLASS % dict(annotations=annotations, names=names)
    return text


# Fixed-width C types and their ctypes spelling. ctypes has no intptr_t: on every platform
# the library supports (LP64 Linux) ssize_t/size_t have the same width and signedness.
SCALARS: Dict[str, str] = {
    "int8_t": "ctypes.c_int8",
    "int16_t": "ctypes.c_int16",
    "int32_t": "ctypes.c_int32",
    "int64_t": "ctypes.c_int64",
    "uint8_t": "ctypes.c_uint8",
    "uint16_t": "ctypes.c_uint16",
    "uint32_t": "ctypes.c_uint32",
    "uint64_t": "ctypes.c_uint64",
    "size_t": "ctypes.c_size_t",
    "intptr_t": "ctypes.c_ssize_t",
    "uintptr_t": "ctypes.c_size_t",
    "ptrdiff_t": "ctypes.c_ssize_t",
    "char": "ctypes.c_char",
    "float": "ctypes.c_float",
    "double": "ctypes.c_double",
}

FUNCTION_POINTER = re.compile(r"^(?P<ret>.+?)\s*\(\*\)\((?P<params>.*)\)$")


class BackendError(Exception):
    """A construct of the header that this backend cannot express in ctypes."""


def split_top_level(text: str) -> List[str]:
    """Split a parameter list at the commas that are not inside parentheses."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


class TypeMapper:
    """Translates the model's C type spellings into ctypes expressions."""

    def __init__(self, header):
        self.header = header

    def base(self, name: str) -> str:
        if name.startswith("struct "):
            name = name[len("struct ") :]
        if name in SCALARS:
            return SCALARS[name]
        if name in self.header.typedefs:
            return name
        raise BackendError(f"no ctypes spelling for the C type {name!r}")

    def function_pointer(self, return_type: str, param_types: List[str]) -> str:
        restype = "None" if self.strip_const(return_type) == "void" else self.ctype(return_type)
        argtypes = [self.ctype(p) for p in param_types]
        return f"ctypes.CFUNCTYPE({', '.join([restype] + argtypes)})"

    @staticmethod
    def strip_const(spelling: str) -> str:
        return re.sub(r"\s+", " ", re.sub(r"\bconst\b", " ", spelling)).strip()

    def ctype(self, spelling: str) -> str:
        """A ctypes expression for a C type used as a field, parameter or return type."""
        m = FUNCTION_POINTER.match(spelling.strip())
        if m:
            params = split_top_level(m.group("params"))
            if params == ["void"]:
                params = []
            return self.function_pointer(m.group("ret"), params)
        plain = self.strip_const(spelling).replace(" *", "*")
        depth = len(plain) - len(plain.rstrip("*"))
        base = plain.rstrip("*").strip()
        if base == "void":
            if depth == 0:
                raise BackendError("'void' is not a value type")
            # void* is c_void_p; void** a pointer to it, and so on.
            return self.pointer("ctypes.c_void_p", depth - 1)
        if base == "char" and depth == 1:
            # const char* is a NUL-terminated string the callee only reads (or a static
            # string it returns); char* is a caller buffer the callee writes into.
            return "ctypes.c_char_p" if "const" in spelling else "ctypes.POINTER(ctypes.c_char)"
        return self.pointer(self.base(base), depth)

    @staticmethod
    def pointer(expr: str, depth: int) -> str:
        for _ in range(depth):
            expr = f"ctypes.POINTER({expr})"
        return expr


def constant_literal(constant) -> str:
    expr = constant.expr.strip()
    if re.fullmatch(r"0[xX][0-9A-Fa-f]+[uUlL]*", expr):
        return f"0x{constant.value:X}"
    return str(constant.value)


def c_prototype(function) -> str:
    params = ", ".join(f"{p.type} {p.name}" if p.name else p.type for p in function.params)
    return f"{function.return_type} {function.name}({params or 'void'})"


def render_constants(header) -> List[str]:
    lines = ["# ---- constants (every integer #define of the header) ----", ""]
    for constant in header.constants.values():
        value = constant_literal(constant)
        written = constant.expr.strip()
        comment = "" if written == value or written.rstrip("uUlL") == value else f"  # {written}"
        lines.append(f"{constant.name} = {value}{comment}")
    return lines + [""]


def render_types(header, mapper: TypeMapper) -> Tuple[List[str], List[str], List[str]]:
    lines = ["", "# ---- types, in header order ----", ""]
    structs: List[str] = []
    opaque: List[str] = []
    for typedef in header.typedefs.values():
        if typedef.kind == "alias":
            lines.append(f"{typedef.name} = {mapper.ctype(typedef.target)}")
        elif typedef.kind == "function_pointer":
            fn = typedef.function
            lines.append(f"{typedef.name} = {mapper.function_pointer(fn.return_type, [p.type for p in fn.params])}")
        elif typedef.kind == "opaque":
            opaque.append(typedef.name)
            lines += [
                "",
                "",
                f"class {typedef.name}(ctypes.Structure):",
                f'    """Opaque C type {typedef.name}: only pointers to it cross the ABI."""',
                "",
                "",
            ]
        elif typedef.kind == "struct":
            structs.append(typedef.name)
            lines += ["", ""] + render_struct(header.structs[typedef.name], mapper) + ["", ""]
        else:
            raise BackendError(f"typedef {typedef.name} has the unknown kind {typedef.kind!r}")
    return lines, structs, opaque


def render_struct(struct, mapper: TypeMapper) -> List[str]:
    lines = [f"class {struct.name}(ctypes.Structure):", f'    """C struct {struct.name}."""', "", "    _fields_ = ["]
    for f in struct.fields:
        if f.function is not None:
            expr = mapper.function_pointer(f.function.return_type, [p.type for p in f.function.params])
        else:
            expr = mapper.ctype(f.type)
        comment = ""
        if f.array_length is not None:
            # Keep the header's named length (EPC_TENSOR_MAX_DIMS) where it is one constant.
            named = f.array_expr.strip() in mapper.header.constants
            expr = f"{expr} * {f.array_expr.strip() if named else f.array_length}"
            if not named and f.array_expr.strip() != str(f.array_length):
                comment = f"  # [{f.array_expr}]"
        lines.append(f'        ("{f.name}", {expr}),{comment}')
    lines.append("    ]")
    return lines


def render_prototypes(header, mapper: TypeMapper) -> List[str]:
    lines = [
        "",
        "# ---- functions: name -> (restype, argtypes) ----",
        "",
        "PROTOTYPES: Dict[str, Tuple[Any, List[Any]]] = {",
    ]
    for function in header.functions.values():
        restype = "None" if mapper.strip_const(function.return_type) == "void" else mapper.ctype(function.return_type)
        argtypes = ", ".join(mapper.ctype(p.type) for p in function.params)
        lines.append(f"    # {c_prototype(function)}")
        lines.append(f'    "{function.name}": ({restype}, [{argtypes}]),')
    lines.append("}")
    return lines


BIND = '''

def bind(cdll: ctypes.CDLL) -> "list[str]":
    """Set restype/argtypes on every function of PROTOTYPES that `cdll` exports.

    Returns the names `cdll` lacks (a library older than this header within the same ABI
    major has a prefix of the functions), so the caller decides what a missing one means.
    """
    missing: "list[str]" = []
    for name, (restype, argtypes) in PROTOTYPES.items():
        try:
            function = getattr(cdll, name)
        except AttributeError:
            missing.append(name)
            continue
        function.restype = restype
        function.argtypes = argtypes
    return missing
'''


def render(header) -> Dict[str, str]:
    mapper = TypeMapper(header)
    source = Path(header.path).name
    lines = [
        f"# Generated by tools/bindgen/generate.py from {source}: do not edit.",
        f'"""ctypes declarations of {source}, ABI {header.abi_version_string()}.',
        "",
        "Generated by tools/bindgen/generate.py from the public header: do not edit. After a",
        "header change run `python3 tools/bindgen/generate.py`; CI runs it with --check.",
        "Hand-written code lives beside this module (epcomm/*.py) and builds on these names.",
        '"""',
        "import ctypes",
        "from typing import Any, Dict, List, Tuple",
        "",
        f'HEADER_ABI_VERSION = "{header.abi_version_string()}"',
        "",
    ]
    lines += render_constants(header)
    type_lines, structs, opaque = render_types(header, mapper)
    lines += type_lines
    lines += [
        "",
        "# Every complete struct of the header (the ABI snapshot lists their layouts).",
        f"STRUCTS = ({', '.join(structs)}{',' if len(structs) == 1 else ''})",
        f"OPAQUE_TYPES = ({', '.join(opaque)}{',' if len(opaque) == 1 else ''})",
        "",
    ]
    lines += render_prototypes(header, mapper)
    text = "\n".join(lines) + "\n" + BIND
    # Collapse the blank-line runs that adjacent class blocks leave (PEP 8: two at most).
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    return {OUTPUTS[0]: text, OUTPUTS[1]: render_enums(header)}
