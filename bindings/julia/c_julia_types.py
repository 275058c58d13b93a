# SPDX-License-Identifier: Apache-2.0
"""How C types of epcomm.h map to Julia types, and Julia's layout of isbits structs.

Used by check_julia.py. Two questions are answered here:

  - does a Julia type expression (as written in a ccall or a struct field) denote the C type of
    the header's declaration? `match(c_type, julia_type, position)` returns None or the reason;
  - what size, alignment and field offsets does Julia give an isbits struct? Julia lays out
    an immutable struct of isbits fields like a C compiler: each field at the next multiple of
    its alignment, the size rounded up to the largest alignment; primitive types are aligned
    to their size (x86_64 and aarch64 Linux, up to 8 bytes), `NTuple{N,T}` to `T`'s alignment
    with size `N * sizeof(T)`, pointers (`Ptr{T}`, `Cstring`) are 8 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from julia_forms import StructDef, TypeExpr

# C type -> the Julia spellings that denote it (C's `char` is a byte either way).
C_TO_JULIA: Dict[str, set] = {
    "int8_t": {"Int8"},
    "int16_t": {"Int16", "Cshort"},
    "int32_t": {"Int32", "Cint"},
    "int64_t": {"Int64", "Clonglong"},
    "uint8_t": {"UInt8", "Cuchar"},
    "uint16_t": {"UInt16", "Cushort"},
    "uint32_t": {"UInt32", "Cuint"},
    "uint64_t": {"UInt64", "Culonglong"},
    "size_t": {"Csize_t", "UInt"},
    "intptr_t": {"Int", "Cintptr_t"},
    "uintptr_t": {"UInt", "Cuintptr_t"},
    "ptrdiff_t": {"Cptrdiff_t", "Int"},
    "float": {"Float32", "Cfloat"},
    "double": {"Float64", "Cdouble"},
    "char": {"UInt8", "Int8", "Cchar", "Cuchar"},
}

# Julia primitive type -> (size, alignment) on 64-bit Linux.
PRIMITIVES: Dict[str, Tuple[int, int]] = {
    "Int8": (1, 1),
    "UInt8": (1, 1),
    "Cchar": (1, 1),
    "Cuchar": (1, 1),
    "Bool": (1, 1),
    "Int16": (2, 2),
    "UInt16": (2, 2),
    "Cshort": (2, 2),
    "Cushort": (2, 2),
    "Float16": (2, 2),
    "Int32": (4, 4),
    "UInt32": (4, 4),
    "Cint": (4, 4),
    "Cuint": (4, 4),
    "Float32": (4, 4),
    "Cfloat": (4, 4),
    "Int64": (8, 8),
    "UInt64": (8, 8),
    "Clonglong": (8, 8),
    "Culonglong": (8, 8),
    "Float64": (8, 8),
    "Cdouble": (8, 8),
    "Int": (8, 8),
    "UInt": (8, 8),
    "Csize_t": (8, 8),
    "Cssize_t": (8, 8),
    "Cptrdiff_t": (8, 8),
    "Cintptr_t": (8, 8),
    "Cuintptr_t": (8, 8),
    "Cstring": (8, 8),
    "Ptr": (8, 8),
}


@dataclass
class CType:
    """A header type: kind is prim, void, struct, opaque, fnptr or ptr; `typedef` keeps the
    header typedef name the spelling used (EpcStatus), if any."""

    kind: str
    name: str = ""
    target: Optional["CType"] = None
    const: bool = False
    typedef: Optional[str] = None

    def __str__(self) -> str:
        if self.kind == "ptr":
            return ("const " if self.target.const else "") + str(self.target) + "*"
        return self.typedef or self.name


class CTypes:
    """Parses the header model's type spellings ("const EpcUniqueId*", "void**")."""

    def __init__(self, header):
        self.header = header

    def parse(self, spelling: str) -> CType:
        if "(*" in spelling:
            return CType("fnptr", spelling)
        const = spelling.strip().startswith("const ")
        stars = spelling.count("*")
        words = [w for w in spelling.replace("*", " ").split() if w not in ("const", "struct")]
        if len(words) != 1:
            raise ValueError(f"cannot parse the C type {spelling!r}")
        ctype = self.named(words[0])
        ctype.const = const
        for _ in range(stars):
            ctype = CType("ptr", target=ctype)
        return ctype

    def named(self, name: str) -> CType:
        if name == "void":
            return CType("void", "void")
        if name in C_TO_JULIA:
            return CType("prim", name)
        typedef = self.header.typedefs.get(name)
        if typedef is None:
            raise ValueError(f"unknown C type {name!r}")
        if typedef.kind == "alias":
            resolved = self.parse(typedef.target)
            resolved.typedef = name
            return resolved
        if typedef.kind == "function_pointer":
            return CType("fnptr", typedef.target, typedef=name)
        return CType(typedef.kind, name)  # struct or opaque


class JuliaTypes:
    """The Julia side: aliases (`const EpcStatus = Int32`) and struct definitions of
    LibEpComm.jl, used to resolve names and compute layouts."""

    def __init__(self, aliases: Dict[str, TypeExpr], structs: Dict[str, StructDef]):
        self.aliases = aliases
        self.structs = structs

    def resolve(self, t: TypeExpr, seen: Tuple[str, ...] = ()) -> TypeExpr:
        if t.number is None and not t.args and t.base in self.aliases and t.base not in seen:
            return self.resolve(self.aliases[t.base], seen + (t.base,))
        return t

    # -- matching -------------------------------------------------------------------------

    def match(self, c: CType, julia: TypeExpr, position: str) -> Optional[str]:
        """None if `julia` denotes `c` at `position` ("parameter", "return", "field",
        "pointee"); else a sentence saying why not."""
        written = julia
        julia = self.resolve(julia)
        if written.base in self.aliases and written.base.startswith("Epc") and written.base != c.typedef:
            # the header's typedefs are distinct types even where their layout agrees
            return f"written as {written.base} but C declares {c.typedef or c}"
        if c.kind == "fnptr":
            if julia.base == "Ptr" and len(julia.args) == 1 and julia.args[0].base == "Cvoid":
                return None
            return f"a C function pointer ({c.name}) must be Ptr{{Cvoid}}, not {written}"
        if c.kind == "void":
            if julia.base in ("Cvoid", "Nothing") and not julia.args:
                return None
            return f"C void must be Cvoid, not {written}"
        if c.kind == "prim":
            accepted = C_TO_JULIA[c.name]
            if julia.base in accepted and not julia.args:
                return None
            return f"C {c} must be {' or '.join(sorted(accepted))}, not {written}"
        if c.kind in ("struct", "opaque"):
            if c.kind == "opaque" and position != "pointee":
                return f"the opaque type {c.name} can only be used through a pointer"
            if julia.base == c.name and not julia.args:
                definition = self.structs.get(c.name)
                if definition is None:
                    return f"{c.name} is not defined in LibEpComm.jl"
                if definition.mutable and c.kind == "struct":
                    return f"{c.name} must be an immutable (isbits) struct to have the C layout"
                return None
            return f"C {c.name} must be {c.name}, not {written}"
        # pointers
        target = c.target
        if julia.base == "Cstring" and not julia.args:
            if target.kind == "prim" and target.name == "char" and (target.const or position == "return"):
                return None
            if target.kind == "prim" and target.name == "char":
                return "Cstring is for NUL-terminated strings the library reads; a buffer it writes is Ptr{UInt8}"
            return f"Cstring cannot stand for C {c}"
        if julia.base == "Ref" and len(julia.args) == 1:
            if position != "parameter":
                return f"Ref{{...}} is only valid for a ccall parameter, not a {position} (use Ptr)"
            if target.kind == "void":
                return "void* must be Ptr{Cvoid} (Ref{Cvoid} is not a pointer to anything)"
            return self.pointee(target, julia.args[0], written)
        if julia.base == "Ptr" and len(julia.args) == 1:
            return self.pointee(target, julia.args[0], written)
        return f"C {c} must be Ptr{{...}}" + (" or Ref{...}" if position == "parameter" else "") + f", not {written}"

    def pointee(self, target: CType, julia: TypeExpr, written: TypeExpr) -> Optional[str]:
        reason = self.match(target, julia, "pointee")
        return None if reason is None else f"{written}: {reason}"

    # -- layout ---------------------------------------------------------------------------

    def layout(self, t: TypeExpr, seen: Tuple[str, ...] = ()) -> Tuple[int, int]:
        """(size, alignment) of a field of Julia type `t`; ValueError if it has no C layout."""
        t = self.resolve(t)
        if t.base == "NTuple" and len(t.args) == 2 and t.args[0].number is not None:
            size, align = self.layout(t.args[1], seen)
            return t.args[0].number * size, align
        if t.base in PRIMITIVES and (t.base != "Ptr" or len(t.args) == 1):
            return PRIMITIVES[t.base]
        definition = self.structs.get(t.base)
        if definition is not None and not t.args:
            if definition.mutable:
                raise ValueError(f"{t.base} is a mutable struct: stored by reference, not inline")
            if t.base in seen:
                raise ValueError(f"{t.base} contains itself")
            size, align, _ = self.struct_layout(definition, seen + (t.base,))
            return size, align
        raise ValueError(f"{t} has no known C-compatible layout")

    def struct_layout(
        self, definition: StructDef, seen: Tuple[str, ...] = ()
    ) -> Tuple[int, int, List[Tuple[str, int, int]]]:
        """(size, alignment, [(field, offset, size)]) by Julia's rules for isbits structs."""
        offset, max_align, fields = 0, 1, []
        for name, t, _line in definition.fields:
            size, align = self.layout(t, seen or (definition.name,))
            offset = (offset + align - 1) // align * align
            fields.append((name, offset, size))
            offset += size
            max_align = max(max_align, align)
        size = (offset + max_align - 1) // max_align * max_align
        return size, max_align, fields
