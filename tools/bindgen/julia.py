# SPDX-License-Identifier: Apache-2.0
"""Julia backend of the binding generator: writes EpComm.jl's raw layer, LibEpComm.jl.

The output is one module, `LibEpComm`, that mirrors capi/include/epcomm/epcomm.h one to one:

  - type aliases for the header's scalar typedefs (`const EpcStatus = Int32`), function-pointer
    typedefs as `Ptr{Cvoid}`, opaque structs as `mutable struct EpcGroup end` (used only
    through `Ptr{EpcGroup}`);
  - every EPC_* integer constant, typed as C types it (see `constant_type` below);
  - one isbits `struct` per C struct, field by field (fixed arrays as `NTuple{N,T}`, pointers as
    `Ptr{T}`, function pointers as `Ptr{Cvoid}`), so that Julia's C-compatible layout gives the
    C offsets (bindings/julia/check_julia.py proves it against capi/abi.json);
  - one thin wrapper per C function: `@ccall libepcomm().epc_x(arg::T, ...)::R`, every pointer
    parameter spelled `Ptr{T}` (callers pass a `Ref`, an array, or a pointer).

The library is named by a function call, `libepcomm()`, which returns a path set by
EpComm.__init__ at load time. Julia documents this form ("Non-constant Function
Specifications", Julia >= 1.6): the call is evaluated when the ccall first runs and the symbol
it resolves is cached per call site, so the path must be final before the first call.

Header comments become docstrings (functions, structs) and trailing comments (constants,
fields), so the collective/blocking/thread-safety notes of the C ABI travel with the wrappers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import epcomm_header

OUTPUT = "bindings/julia/EpComm.jl/src/LibEpComm.jl"
OUTPUTS = [OUTPUT]

DEFAULT_LIBRARY = "libepcomm.so.{major}"

# C base types -> Julia types. `char` is a byte: Julia's Cchar is Int8 on x86_64 and UInt8 on
# aarch64, so byte buffers use UInt8 everywhere.
C_TO_JULIA = {
    "int8_t": "Int8",
    "int16_t": "Int16",
    "int32_t": "Int32",
    "int64_t": "Int64",
    "uint8_t": "UInt8",
    "uint16_t": "UInt16",
    "uint32_t": "UInt32",
    "uint64_t": "UInt64",
    "size_t": "Csize_t",
    "intptr_t": "Int",
    "uintptr_t": "UInt",
    "ptrdiff_t": "Cptrdiff_t",
    "float": "Cfloat",
    "double": "Cdouble",
    "char": "UInt8",
    "void": "Cvoid",
}

# Julia integer types by (bits, signed), for constants.
INTEGER_TYPES = {
    (32, True): "Int32",
    (32, False): "UInt32",
    (64, True): "Int64",
    (64, False): "UInt64",
    (8, True): "Int8",
    (8, False): "UInt8",
    (16, True): "Int16",
    (16, False): "UInt16",
}

JULIA_KEYWORDS = {
    "baremodule",
    "begin",
    "break",
    "catch",
    "const",
    "continue",
    "do",
    "else",
    "elseif",
    "end",
    "export",
    "false",
    "finally",
    "for",
    "function",
    "global",
    "if",
    "import",
    "let",
    "local",
    "macro",
    "module",
    "quote",
    "return",
    "struct",
    "true",
    "try",
    "using",
    "while",
    "public",
}


class JuliaGenError(Exception):
    """The header uses something this backend cannot express in Julia."""


# ---------------------------------------------------------------------------------------
# Header comments
# ---------------------------------------------------------------------------------------


class HeaderComments:
    """Doc comments (the /* */ block right above a declaration) and trailing comments (a
    /* */ that starts on a declaration's line) of the header, by line number."""

    def __init__(self, path: str):
        self.lines = Path(path).read_text(encoding="utf-8").split("\n")
        code = epcomm_header.strip_comments("\n".join(self.lines), path)
        self.code_lines = code.split("\n")

    def line(self, number: int) -> str:
        return self.lines[number - 1] if 0 < number <= len(self.lines) else ""

    def is_comment_only(self, number: int) -> bool:
        return self.line(number).strip() != "" and self.code_lines[number - 1].strip() == ""

    def block_above(self, number: int) -> str:
        """The comment block that ends on the line above `number` (no blank line between)."""
        end = number - 1
        if not self.is_comment_only(end) or "*/" not in self.line(end):
            return ""
        start = end
        while start > 1 and "/*" not in self.line(start):
            start -= 1
        text = "\n".join(self.line(n) for n in range(start, end + 1))
        if text.lstrip().startswith("/* ---"):
            return ""  # a section banner, not a declaration's documentation
        return clean_comment(text)

    def trailing(self, number: int) -> str:
        """The comment that starts after code on line `number`, joined if it spans lines."""
        text = self.line(number)
        start = text.find("/*")
        if start < 0 or self.code_lines[number - 1].strip() == "":
            return ""
        parts = [text[start:]]
        n = number
        while "*/" not in parts[-1] and n < len(self.lines):
            n += 1
            parts.append(self.line(n))
        return " ".join(clean_comment(p) for p in parts).strip()


def clean_comment(text: str) -> str:
    text = text.strip()
    text = re.sub(r"^/\*+", "", text)
    text = re.sub(r"\*+/$", "", text)
    lines = [re.sub(r"^\s*\*( |$)", "", line).rstrip() for line in text.split("\n")]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if lines:
        lines[0] = lines[0].lstrip()
    common = min((len(l) - len(l.lstrip()) for l in lines[1:] if l.strip()), default=0)
    return "\n".join(lines[:1] + [l[common:] for l in lines[1:]])


def docstring(text: str, signature: str = "") -> List[str]:
    if not text and not signature:
        return []
    body = text.replace("\\", "\\\\").replace("$", "\\$").replace('"""', '\\"\\"\\"')
    out = ['"""']
    if signature:
        out += [f"    {signature}", ""]
    out += body.split("\n") if body else []
    out.append('"""')
    return out


# ---------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------


def split_pointer(c_type: str) -> Tuple[str, int]:
    """'const EpcGroup*' -> ('EpcGroup', 1); qualifiers do not change the Julia type."""
    stars = c_type.count("*")
    base = [word for word in c_type.replace("*", " ").split() if word not in ("const", "struct")]
    if len(base) != 1:
        raise JuliaGenError(f"cannot map the C type {c_type!r} to Julia")
    return base[0], stars


class TypeMapper:
    def __init__(self, header):
        self.header = header

    def base(self, name: str) -> str:
        if name in C_TO_JULIA:
            return C_TO_JULIA[name]
        if name in self.header.typedefs:
            return name  # every typedef gets a Julia declaration of the same name
        raise JuliaGenError(f"unknown C type {name!r}")

    def value(self, c_type: str) -> str:
        """The Julia type of a parameter, return value or field of C type `c_type`."""
        if c_type.startswith("const char*") and c_type.count("*") == 1:
            return "Cstring"
        if "(*" in c_type:  # an inline function-pointer field or parameter
            return "Ptr{Cvoid}"
        name, stars = split_pointer(c_type)
        julia = self.base(name)
        for _ in range(stars):
            julia = f"Ptr{{{julia}}}"
        return julia

    def field(self, field) -> str:
        if field.function is not None:
            return "Ptr{Cvoid}"
        julia = self.value(field.type)
        if field.array_length is not None:
            return f"NTuple{{{field.array_length}, {julia}}}"
        return julia


# ---------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------


def typed_constant_groups(header, comments: HeaderComments) -> Dict[str, str]:
    """Constants that name values of a scalar typedef, by the header's layout convention: the
    #defines that directly follow `typedef <int> Name;` (only comment lines may sit between)
    take the type `Name`. E.g. EPC_OK.. after EpcStatus, EPC_DTYPE_* after EpcDtype."""
    by_line = {c.line: c for c in header.constants.values()}
    owner: Dict[str, str] = {}
    for typedef in header.typedefs.values():
        if typedef.kind != "alias":
            continue
        number = typedef.line + 1
        while number <= len(comments.lines):
            if number in by_line:
                owner[by_line[number].name] = typedef.name
            elif not comments.is_comment_only(number):
                break
            number += 1
    return owner


def literal_type(token: str, value: int) -> Tuple[int, bool]:
    """C's type for an integer literal (C99 6.4.4.1), as (bits, signed)."""
    suffix = re.sub(r"^[0-9A-Fa-fxX]+?(?=[uUlL]*$)", "", token).lower()
    decimal = not token.lower().startswith("0") or token == "0"
    unsigned = "u" in suffix
    longs = suffix.count("l")
    candidates = []
    for bits in (32, 64) if longs == 0 else (64,):
        if unsigned:
            candidates.append((bits, False))
        elif decimal:
            candidates.append((bits, True))
        else:
            candidates += [(bits, True), (bits, False)]
    for bits, signed in candidates:
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if low <= value <= high:
            return bits, signed
    raise JuliaGenError(f"integer literal {token} does not fit 64 bits")


def strip_parens(expr: str) -> str:
    expr = expr.strip()
    while expr.startswith("(") and matching_paren(expr, 0) == len(expr) - 1:
        expr = expr[1:-1].strip()
    return expr


def matching_paren(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return -1


def constant_type(constant, header, groups: Dict[str, str]) -> str:
    """The Julia type of a constant: its typedef group's type, else the type C gives the
    macro's expression (an outer integer cast, a literal's type, or int/unsigned)."""
    if constant.name in groups:
        return groups[constant.name]
    expr = strip_parens(constant.expr)
    cast = re.match(r"\(\s*(\w+)\s*\)", expr)
    if cast and cast.group(1) in epcomm_header.INTEGER_CASTS:
        rest = expr[cast.end() :].strip()
        if re.fullmatch(r"[\w]+", rest) or (rest.startswith("(") and matching_paren(rest, 0) == len(rest) - 1):
            bits, signed = epcomm_header.INTEGER_CASTS[cast.group(1)]
            return C_TO_JULIA.get(cast.group(1), INTEGER_TYPES[(bits, signed)])
    if re.fullmatch(r"(0[xX][0-9A-Fa-f]+|\d+)[uUlL]*", expr):
        return INTEGER_TYPES[literal_type(expr, constant.value)]
    if re.fullmatch(r"[A-Za-z_]\w*", expr) and expr in header.constants:
        return constant_type(header.constants[expr], header, groups)
    unsigned = re.search(r"\b(0[xX][0-9A-Fa-f]+|\d+)[lL]*[uU]", expr) is not None
    for bits in (32, 64):
        low, high = (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        if low <= constant.value <= high:
            return INTEGER_TYPES[(bits, not unsigned)]
    raise JuliaGenError(f"{constant.name} = {constant.value} does not fit 64 bits")


def julia_literal(constant) -> str:
    if re.fullmatch(r"0[xX][0-9A-Fa-f]+[uUlL]*", strip_parens(constant.expr)) and constant.value >= 0:
        return f"0x{constant.value:x}"
    return str(constant.value)


# ---------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------


def julia_identifier(name: Optional[str], index: int) -> str:
    if not name:
        return f"arg{index + 1}"
    return f"{name}_" if name in JULIA_KEYWORDS else name


def render_types(header, types: TypeMapper, comments: HeaderComments) -> List[str]:
    out = ["# ---- Types -------------------------------------------------------------------------", ""]
    for typedef in header.typedefs.values():
        if typedef.kind == "alias":
            note = comments.trailing(typedef.line)
            line = f"const {typedef.name} = {types.value(typedef.target)}"
            out.append(f"{line}  # C: {typedef.target}" + (f"; {note}" if note else ""))
        elif typedef.kind == "function_pointer":
            out.append(f"const {typedef.name} = Ptr{{Cvoid}}  # C: {typedef.target}")
        elif typedef.kind == "opaque":
            out.append(f"mutable struct {typedef.name} end  # opaque: used only as Ptr{{{typedef.name}}}")
    return out + [""]


def render_constants(header, comments: HeaderComments) -> List[str]:
    groups = typed_constant_groups(header, comments)
    out = ["# ---- Constants ---------------------------------------------------------------------", ""]
    previous_line = None
    for constant in header.constants.values():
        if previous_line is not None and constant.line != previous_line + 1:
            out.append("")
        previous_line = constant.line
        julia_type = constant_type(constant, header, groups)
        note = comments.trailing(constant.line)
        line = f"const {constant.name} = {julia_type}({julia_literal(constant)})"
        out.append(line + (f"  # {note}" if note else ""))
    return out + [""]


def render_struct(struct, types: TypeMapper, comments: HeaderComments) -> List[str]:
    text = comments.block_above(struct.line) or f"The C struct `{struct.name}` (see the field comments)."
    out = docstring(text, struct.name)
    out.append(f"struct {struct.name}")
    for field in struct.fields:
        line = f"    {julia_identifier(field.name, 0)}::{types.field(field)}"
        note = comments.trailing(field.line)
        if field.array_expr and field.array_expr != str(field.array_length):
            note = f"[{field.array_expr}]" + (f" {note}" if note else "")
        if field.function is not None:
            note = f"C: {field.type}" + (f"; {note}" if note else "")
        out.append(line + (f"  # {note}" if note else ""))
    out.append("end")
    return out + [""]


def render_function(function, types: TypeMapper, comments: HeaderComments) -> List[str]:
    names = [julia_identifier(p.name, i) for i, p in enumerate(function.params)]
    c_params = ", ".join(f"{p.type} {p.name or ''}".strip() for p in function.params) or "void"
    signature = f"{function.name}({', '.join(names)})  # C: {function.return_type} {function.name}({c_params})"
    out = docstring(comments.block_above(function.line), signature)
    args = ", ".join(f"{name}::{types.value(p.type)}" for name, p in zip(names, function.params))
    out.append(f"function {function.name}({', '.join(names)})")
    out.append(f"    @ccall libepcomm().{function.name}({args})::{types.value(function.return_type)}")
    out.append("end")
    return out + [""]


def wrap_words(keyword: str, names: List[str], width: int = 92) -> List[str]:
    """`export a, b, ...` broken into lines of at most `width` characters."""
    lines, current = [], keyword
    for i, name in enumerate(names):
        piece = name + ("," if i < len(names) - 1 else "")
        if len(current) + 1 + len(piece) > width and current != keyword:
            lines.append(current)
            current = "    " + piece
        else:
            current = f"{current} {piece}" if current.strip() else current + piece
    lines.append(current)
    return lines


def render(header) -> dict:
    comments = HeaderComments(header.path)
    types = TypeMapper(header)
    major, minor, patch = header.abi_version()
    exported = list(header.typedefs) + list(header.constants) + list(header.functions)
    lines = (
        [
            f"# LibEpComm: the epcomm C ABI {major}.{minor}.{patch} (capi/include/epcomm/epcomm.h) in Julia, one to one.",
            "#",
            "# Generated by tools/bindgen/generate.py (backend tools/bindgen/julia.py) - do not edit.",
            "# Change the header and run `python3 tools/bindgen/generate.py`; CI runs it with --check and",
            "# bindings/julia/check_julia.py proves the declarations against the header and capi/abi.json.",
            "",
            '"""',
            "    LibEpComm",
            "",
            "Raw declarations of epcomm's C ABI: constants, isbits structs with the C layout, and one",
            "`@ccall` wrapper per C function, taking `Ptr` arguments and returning the `EpcStatus`.",
            "Nothing here checks errors or owns memory; the EpComm module builds the safe API on it.",
            '"""',
            "module LibEpComm",
            "",
        ]
        + wrap_words("export", ["libepcomm", "libepcomm_path"] + exported)
        + [
            "",
            "# ---- Library -----------------------------------------------------------------------",
            "",
            '"""',
            "    libepcomm_path[]",
            "",
            "Path (or SONAME) of the C library every wrapper calls. EpComm's `__init__` sets it, from",
            f'`ENV["EPCOMM_LIB"]` or the default SONAME `{DEFAULT_LIBRARY.format(major=major)}`, before any call; it must not',
            "change afterwards (each call site caches the symbol it resolved on its first call).",
            '"""',
            f'const libepcomm_path = Ref{{String}}("{DEFAULT_LIBRARY.format(major=major)}")',
            "",
            '"""',
            "    libepcomm()",
            "",
            "The library of every `@ccall libepcomm().epc_*(...)` below. A function call as the library",
            "is Julia's documented form for a library path known only at run time (manual, \"Calling C",
            'and Fortran Code", Non-constant Function Specifications; Julia >= 1.6): it is evaluated when',
            "a call site first runs, and the resolved symbol is cached for that call site.",
            '"""',
            "libepcomm() = libepcomm_path[]",
            "",
        ]
    )
    lines += render_types(header, types, comments)
    lines += render_constants(header, comments)
    lines += ["# ---- Structs (isbits; the field order and types give the C layout) ----------------", ""]
    for struct in header.structs.values():
        lines += render_struct(struct, types, comments)
    lines += ["# ---- Functions (one thin @ccall wrapper each) ---------------------------------------", ""]
    for function in header.functions.values():
        lines += render_function(function, types, comments)
    lines += ["end # module LibEpComm", ""]
    text = "\n".join(lines)
    return {OUTPUT: text}
