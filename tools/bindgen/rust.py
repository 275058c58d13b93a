# SPDX-License-Identifier: Apache-2.0
"""Rust backend of the binding generator: bindings/rust/epcomm-sys/src/ffi.rs.

Everything comes from tools/epcomm_header.py's model of the header, so a new function,
struct, typedef or constant appears in ffi.rs on the next `python3 tools/bindgen/generate.py`
without touching this file. What it writes:

  - every integer constant, typed by the typedef it belongs to (EPC_DTYPE_* is an EpcDtype),
    else by an explicit cast in its expression, else as the smallest of u32/i32/u64/i64;
  - every typedef: integer aliases as `pub type`, function pointers as
    `Option<unsafe extern "C" fn(..)>` (C's nullable function pointer), opaque structs as
    zero-sized #[repr(C)] types that are !Send, !Sync and !Unpin;
  - every struct as #[repr(C)] with the exact field types, plus a zeroed Default (every type
    the header may use is valid when all-zero, and zero means "default" in the ABI);
  - every function in one `extern "C"` block (left out when the crate is built with its
    `dlopen` feature, which must not link the library) and as a pointer type in `fn_types`;
  - tables of struct layouts, typedef layouts, constant values and function names, which
    the crate's tests compare with the ABI snapshot capi/abi.json.

Doc comments are copied from the header's own comments, so the Rust docs state what the
header states (collective or local, blocking, thread-safety, pointer lifetimes).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

OUTPUTS = ["bindings/rust/epcomm-sys/src/ffi.rs"]

HEADER_RELATIVE = "capi/include/epcomm/epcomm.h"

# C base types the header may use, as Rust spells them.
BASE_TYPES: Dict[str, str] = {
    "int8_t": "i8",
    "int16_t": "i16",
    "int32_t": "i32",
    "int64_t": "i64",
    "uint8_t": "u8",
    "uint16_t": "u16",
    "uint32_t": "u32",
    "uint64_t": "u64",
    "size_t": "usize",
    "intptr_t": "isize",
    "uintptr_t": "usize",
    "ptrdiff_t": "isize",
    "char": "c_char",
    "float": "f32",
    "double": "f64",
    "void": "c_void",
}

# Integer types by (bits, signed), used to check that a constant fits its type.
INTEGER_RANGES: Dict[str, Tuple[int, int]] = {
    "i8": (-(1 << 7), (1 << 7) - 1),
    "i16": (-(1 << 15), (1 << 15) - 1),
    "i32": (-(1 << 31), (1 << 31) - 1),
    "i64": (-(1 << 63), (1 << 63) - 1),
    "isize": (-(1 << 63), (1 << 63) - 1),
    "u8": (0, (1 << 8) - 1),
    "u16": (0, (1 << 16) - 1),
    "u32": (0, (1 << 32) - 1),
    "u64": (0, (1 << 64) - 1),
    "usize": (0, (1 << 64) - 1),
}

# Types a constant without an owning typedef or a cast gets: the first that holds it.
UNTYPED_CONSTANT_TYPES = ["u32", "i32", "u64", "i64"]

# A typedef `EpcFooBar` owns the constants named EPC_FOO_BAR_* (or EPC_FOO_*, the longest
# match winning). Status codes and scale layouts (EPC_SCALES_*) do not follow that spelling.
EXTRA_CONSTANT_OWNERS: Dict[str, List[str]] = {
    "EpcStatus": ["EPC_OK", "EPC_ERR_"],
    "EpcScaleLayout": ["EPC_SCALES_"],
}

RUST_KEYWORDS = {
    "as",
    "async",
    "await",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "Self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "type",
    "unsafe",
    "use",
    "where",
    "while",
    "abstract",
    "become",
    "box",
    "do",
    "final",
    "macro",
    "override",
    "priv",
    "try",
    "typeof",
    "unsized",
    "virtual",
    "yield",
}
NOT_RAW_IDENTIFIERS = {"self", "Self", "super", "crate", "_"}


class RustGenError(Exception):
    pass


# ---------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------


def identifier(name: str) -> str:
    """A C name as a Rust identifier (keywords become raw identifiers)."""
    if name in NOT_RAW_IDENTIFIERS:
        return name + "_"
    if name in RUST_KEYWORDS:
        return "r#" + name
    return name


def split_top_level(text: str) -> List[str]:
    """Split a parameter list at commas that are not inside parentheses."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


FUNCTION_POINTER = re.compile(r"^(?P<ret>.+?)\s*\(\*\s*\w*\s*\)\s*\((?P<params>.*)\)$")
POINTER_TYPE = re.compile(r"^(?P<const>const\s+)?(?:struct\s+)?(?P<base>\w+)(?P<suffix>(?:\s*\*|\s+const)*)$")


class TypeMapper:
    def __init__(self, header):
        self.header = header

    def base(self, name: str) -> str:
        if name in BASE_TYPES:
            return BASE_TYPES[name]
        if name in self.header.typedefs:
            return name
        raise RustGenError(f"no Rust spelling for the C type {name!r}")

    def value_type(self, spelling: str) -> str:
        """The Rust type of a value (field, parameter) spelled `spelling` in C."""
        spelling = spelling.strip()
        if "(*" in spelling:
            m = FUNCTION_POINTER.match(spelling)
            if not m:
                raise RustGenError(f"cannot parse the function-pointer type {spelling!r}")
            params = [p for p in split_top_level(m.group("params")) if p != "void"]
            return self.function_pointer(m.group("ret"), [(None, p) for p in params])
        m = POINTER_TYPE.match(spelling)
        if not m:
            raise RustGenError(f"cannot parse the C type {spelling!r}")
        rust = self.base(m.group("base"))
        # Each `*` makes a pointer to what is left of it; a `const` right after a `*` makes
        # that pointer itself const, i.e. the next pointer out points to const.
        pointee_const = bool(m.group("const"))
        levels = re.findall(r"\*|const", m.group("suffix"))
        i = 0
        while i < len(levels):
            if levels[i] == "const":  # `T const` right after the base: same as `const T`
                pointee_const = True
                i += 1
                continue
            rust = ("*const " if pointee_const else "*mut ") + rust
            pointee_const = i + 1 < len(levels) and levels[i + 1] == "const"
            i += 2 if pointee_const else 1
        if rust == "c_void":
            raise RustGenError(f"a value of type void ({spelling!r})")
        return rust

    def return_suffix(self, spelling: str) -> str:
        if spelling.strip() == "void":
            return ""
        return " -> " + self.value_type(spelling)

    def parameter_list(self, params) -> str:
        """`name: Type, ...` for named parameters; unnamed ones get argN."""
        rendered = []
        for i, (name, spelling) in enumerate(params):
            rendered.append(f"{identifier(name) if name else f'arg{i}'}: {self.value_type(spelling)}")
        return ", ".join(rendered)

    def bare_fn(self, return_type: str, params) -> str:
        return f'unsafe extern "C" fn({self.parameter_list(params)}){self.return_suffix(return_type)}'

    def function_pointer(self, return_type: str, params) -> str:
        # C function pointers may be NULL; Option<fn> has the same ABI and says so.
        return f"Option<{self.bare_fn(return_type, params)}>"

    def field_type(self, field) -> str:
        if field.function is not None:
            element = self.function_pointer(
                field.function.return_type, [(p.name, p.type) for p in field.function.params]
            )
        else:
            element = self.value_type(field.type)
        if field.array_length is None:
            return element
        return f"[{element}; {self.array_length(field)}]"

    def array_length(self, field) -> str:
        expr = (field.array_expr or "").strip()
        if expr in self.header.constants:
            return f"{expr} as usize"
        return str(field.array_length)

    def integer_alias(self, name: str) -> Optional[str]:
        """The Rust integer type behind a typedef (following alias chains), or None."""
        seen = set()
        while name in self.header.typedefs and name not in seen:
            seen.add(name)
            typedef = self.header.typedefs[name]
            if typedef.kind != "alias":
                return None
            name = typedef.target
        rust = BASE_TYPES.get(name)
        return rust if rust in INTEGER_RANGES else None


# ---------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------


def typedef_words(name: str) -> List[str]:
    return [w.upper() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", name)]


def constant_owner(header, types: TypeMapper, constant) -> Optional[str]:
    """The integer typedef a constant belongs to, by the header's naming convention."""
    best: Optional[Tuple[int, str]] = None
    for typedef in header.typedefs.values():
        if typedef.line > constant.line or types.integer_alias(typedef.name) is None:
            continue
        words = typedef_words(typedef.name)
        patterns = ["_".join(words[:n]) + "_" for n in range(len(words), 1, -1)]
        patterns += EXTRA_CONSTANT_OWNERS.get(typedef.name, [])
        for pattern in patterns:
            matches = (
                constant.name.startswith(pattern) and len(constant.name) > len(pattern)
                if pattern.endswith("_")
                else constant.name == pattern
            )
            if matches and (best is None or len(pattern) > best[0]):
                best = (len(pattern), typedef.name)
    return best[1] if best else None


CAST = re.compile(r"^\(*\s*\(\s*(?P<type>u?int(?:8|16|32|64)_t|size_t)\s*\)")


def constant_type(header, types: TypeMapper, constant) -> str:
    owner = constant_owner(header, types, constant)
    if owner is not None:
        rust = types.integer_alias(owner)
        low, high = INTEGER_RANGES[rust]
        if not low <= constant.value <= high:
            raise RustGenError(f"{constant.name} = {constant.value} does not fit its type {owner} ({rust})")
        return owner
    cast = CAST.match(constant.expr.strip())
    if cast:
        return BASE_TYPES[cast.group("type")]
    for rust in UNTYPED_CONSTANT_TYPES:
        low, high = INTEGER_RANGES[rust]
        if low <= constant.value <= high:
            return rust
    raise RustGenError(f"{constant.name} = {constant.value} fits no Rust integer type")


HEX_LITERAL = re.compile(r"^\(*\s*0[xX][0-9A-Fa-f]+[uUlL]*\s*\)*$")


def rust_literal(value: int, expr: str) -> str:
    """The value as a Rust literal: hex where the header writes hex (flags, masks) or for
    large all-ones masks, decimal otherwise."""
    if value < 0:
        return f"-{-value}"
    if HEX_LITERAL.match(expr.strip()) or (value >= 0x10000 and (value & (value + 1)) == 0):
        return f"0x{value:X}"
    return str(value)


# ---------------------------------------------------------------------------------------
# Doc comments, copied from the header
# ---------------------------------------------------------------------------------------


class HeaderComments:
    """The header's comments by line: the block right above a declaration, and the comment
    trailing a line (which may continue on the next lines)."""

    def __init__(self, path: str):
        try:
            self.lines = Path(path).read_text(encoding="utf-8").split("\n")
        except OSError:
            self.lines = []

    @staticmethod
    def clean(lines: List[str]) -> List[str]:
        text = "\n".join(lines)
        text = re.sub(r"^\s*/\*+", "", text)
        text = re.sub(r"\*+/\s*$", "", text)
        result = []
        for line in text.split("\n"):
            line = re.sub(r"^\s*\*(?!/)\s?", "", line).strip()
            result.append(line)
        while result and not result[0]:
            result.pop(0)
        while result and not result[-1]:
            result.pop()
        return result

    def above(self, line: int) -> List[str]:
        """The /* ... */ block ending on the line right above `line` (1-based); section
        banners (`/* -----`) are not documentation of the next declaration."""
        end = line - 2
        if end < 0 or end >= len(self.lines) or not self.lines[end].strip().endswith("*/"):
            return []
        start = end
        while start >= 0 and "/*" not in self.lines[start]:
            start -= 1
        if start < 0:
            return []
        opening = self.lines[start]
        if opening[: opening.index("/*")].strip():
            return []  # the comment trails code (a field's note), it is not a block above
        if any("*/" in text for text in self.lines[start:end]):
            return []  # several comments: only a single block right above counts
        if opening.lstrip().startswith("/* ---"):
            return []
        return self.clean(self.lines[start : end + 1])

    def trailing(self, line: int) -> List[str]:
        """The /* ... */ comment that starts after code on `line`, possibly spanning lines."""
        index = line - 1
        if index >= len(self.lines):
            return []
        text = self.lines[index]
        code, sep, rest = text.partition("/*")
        if not sep or not code.strip():
            return []
        collected = ["/*" + rest]
        while "*/" not in collected[-1] and index + 1 < len(self.lines):
            index += 1
            collected.append(self.lines[index])
        return self.clean(collected)

    def doc(self, line: int, indent: str = "", trailing: bool = True) -> List[str]:
        lines = self.above(line)
        extra = self.trailing(line) if trailing else []
        if lines and extra:
            lines = lines + [""] + extra
        else:
            lines = lines or extra
        # Brackets in C comments ("dispatch_recv[1]") are not rustdoc links.
        lines = [text.replace("[", "\\[").replace("]", "\\]") for text in lines]
        return [f"{indent}///{' ' + text if text else ''}" for text in lines]


# ---------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------

PREAMBLE = """\
// Generated by tools/bindgen/generate.py from {header} — do not edit.
// ABI version {version}. Regenerate with `python3 tools/bindgen/generate.py`; CI checks it
// with `python3 tools/bindgen/generate.py --check`.
//
// Raw declarations of the epcomm C ABI, one item per declaration of the header, in the
// header's order. The safe API is the `epcomm` crate.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code)]
#![allow(clippy::all)]

use core::ffi::{{c_char, c_void}};
"""

LAYOUT_TYPES = """\
// ---------------------------------------------------------------------------------------
// Layout tables: what this Rust build makes of every declaration above. The crate's tests
// compare them with the ABI snapshot (capi/abi.json), so a layout mistake here cannot pass.
// ---------------------------------------------------------------------------------------

/// Size and offset of one struct field as Rust lays it out.
#[derive(Clone, Copy, Debug)]
pub struct FieldLayout {
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
}

/// Size, alignment and fields of one `#[repr(C)]` struct as Rust lays it out.
#[derive(Clone, Copy, Debug)]
pub struct StructLayout {
    pub name: &'static str,
    pub size: usize,
    pub align: usize,
    pub fields: &'static [FieldLayout],
}

/// Size and alignment of one non-opaque typedef (integer alias or function pointer).
#[derive(Clone, Copy, Debug)]
pub struct TypedefLayout {
    pub name: &'static str,
    pub size: usize,
    pub align: usize,
}
"""


def render_constant(header, types, comments, constant) -> List[str]:
    rust_type = constant_type(header, types, constant)
    lines = comments.doc(constant.line)
    lines.append(f"pub const {constant.name}: {rust_type} = {rust_literal(constant.value, constant.expr)};")
    return lines


def render_typedef(header, types, comments, typedef) -> List[str]:
    lines = comments.doc(typedef.line)
    if typedef.kind == "alias":
        lines.append(f"pub type {typedef.name} = {types.value_type(typedef.target)};")
    elif typedef.kind == "function_pointer":
        params = [(p.name, p.type) for p in typedef.function.params]
        lines.append(f"pub type {typedef.name} = {types.function_pointer(typedef.function.return_type, params)};")
    elif typedef.kind == "opaque":
        if not lines:
            lines.append(f"/// Opaque handle; only ever used behind a pointer.")
        lines += [
            "///",
            "/// Zero-sized and never constructed in Rust; the marker makes it !Send, !Sync and",
            "/// !Unpin, so nothing is assumed about the C object it stands for.",
            "#[repr(C)]",
            f"pub struct {typedef.name} {{",
            "    _private: [u8; 0],",
            "    _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,",
            "}",
        ]
    elif typedef.kind == "struct":
        lines += render_struct(header, types, comments, header.structs[typedef.name])
    else:
        raise RustGenError(f"typedef {typedef.name}: unknown kind {typedef.kind!r}")
    return lines


def render_struct(header, types, comments, struct) -> List[str]:
    lines = ["#[repr(C)]", "#[derive(Clone, Copy, Debug)]", f"pub struct {struct.name} {{"]
    for field in struct.fields:
        lines += comments.doc(field.line, indent="    ")
        lines.append(f"    pub {identifier(field.name)}: {types.field_type(field)},")
    lines += [
        "}",
        "",
        f"impl Default for {struct.name} {{",
    ]
    if any(field.name == "struct_size" for field in struct.fields):
        lines += [
            '    /// All zeros, the ABI\'s "default" for every field; the caller still sets',
            "    /// `struct_size` and `abi_version`.",
        ]
    else:
        lines.append("    /// All zeros.")
    lines += [
        "    fn default() -> Self {",
        "        // SAFETY: every field is an integer, a raw pointer, an Option of a function",
        "        // pointer, or an array or struct of those; all-zero bytes are valid for each.",
        "        unsafe { core::mem::zeroed() }",
        "    }",
        "}",
    ]
    return lines


def render_functions(header, types, comments) -> List[str]:
    functions = sorted(header.functions.values(), key=lambda f: f.line)
    lines = [
        "// ---------------------------------------------------------------------------------------",
        f"// Functions. Linked from libepcomm.so.{header.abi_version()[0]}, except with the `dlopen` feature, where only the",
        "// function table from epc_get_api() is used (see `fn_types` and the crate's `api()`).",
        "// ---------------------------------------------------------------------------------------",
        "",
        '#[cfg(not(feature = "dlopen"))]',
        'extern "C" {',
    ]
    for i, function in enumerate(functions):
        if i:
            lines.append("")
        lines += comments.doc(function.line, indent="    ", trailing=False)
        params = types.parameter_list([(p.name, p.type) for p in function.params])
        lines.append(f"    pub fn {function.name}({params}){types.return_suffix(function.return_type)};")
    lines += [
        "}",
        "",
        "/// The type of each function above as a pointer, for code that resolves symbols itself",
        "/// (dlsym) instead of linking.",
        "pub mod fn_types {",
        "    use super::*;",
    ]
    for function in functions:
        bare = types.bare_fn(function.return_type, [(p.name, p.type) for p in function.params])
        lines.append(f"    pub type {function.name} = {bare};")
    lines.append("}")
    return lines


def render_layouts(header, types) -> List[str]:
    lines = [LAYOUT_TYPES]
    lines.append("/// Every struct of the header, in header order.")
    lines.append("pub const STRUCT_LAYOUTS: &[StructLayout] = &[")
    for struct in sorted(header.structs.values(), key=lambda s: s.line):
        name = struct.name
        lines += [
            "    StructLayout {",
            f'        name: "{name}",',
            f"        size: core::mem::size_of::<{name}>(),",
            f"        align: core::mem::align_of::<{name}>(),",
            "        fields: &[",
        ]
        for field in struct.fields:
            field_name = identifier(field.name)
            lines.append(
                f'            FieldLayout {{ name: "{field.name}", '
                f"offset: core::mem::offset_of!({name}, {field_name}), "
                f"size: core::mem::size_of::<{types.field_type(field)}>() }},"
            )
        lines += ["        ],", "    },"]
    lines += ["];", ""]

    lines.append("/// Every integer-alias and function-pointer typedef of the header.")
    lines.append("pub const TYPEDEF_LAYOUTS: &[TypedefLayout] = &[")
    for typedef in sorted(header.typedefs.values(), key=lambda t: t.line):
        if typedef.kind not in ("alias", "function_pointer"):
            continue
        lines.append(
            f'    TypedefLayout {{ name: "{typedef.name}", '
            f"size: core::mem::size_of::<{typedef.name}>(), "
            f"align: core::mem::align_of::<{typedef.name}>() }},"
        )
    lines += ["];", ""]

    lines.append("/// Every constant of the header with its value.")
    lines.append("pub const CONSTANT_VALUES: &[(&str, i128)] = &[")
    for constant in sorted(header.constants.values(), key=lambda c: c.line):
        lines.append(f'    ("{constant.name}", {constant.name} as i128),')
    lines += ["];", ""]

    lines.append("/// Every function of the header, in header order.")
    lines.append("pub const FUNCTION_NAMES: &[&str] = &[")
    for function in sorted(header.functions.values(), key=lambda f: f.line):
        lines.append(f'    "{function.name}",')
    lines.append("];")
    return lines


def render(header) -> Dict[str, str]:
    types = TypeMapper(header)
    comments = HeaderComments(header.path)
    items: List[Tuple[int, List[str]]] = []
    for constant in header.constants.values():
        items.append((constant.line, render_constant(header, types, comments, constant)))
    for typedef in header.typedefs.values():
        items.append((typedef.line, render_typedef(header, types, comments, typedef)))
    items.sort(key=lambda item: item[0])

    parts = [PREAMBLE.format(header=HEADER_RELATIVE, version=header.abi_version_string())]
    for _, lines in items:
        parts.append("\n".join(lines) + "\n")
    parts.append("\n".join(render_functions(header, types, comments)) + "\n")
    parts.append("\n".join(render_layouts(header, types)) + "\n")
    return {OUTPUTS[0]: "\n".join(parts)}
