# SPDX-License-Identifier: Apache-2.0
"""The Julia forms check_julia.py reads, taken from the tree-sitter-julia syntax tree.

julia_treesitter.py parses a file and rejects it if the tree has an ERROR or MISSING node;
this module reads the accepted tree: type expressions (`Ptr{NTuple{4, Int64}}`), foreign calls
(`@ccall lib.f(a::T, ...)::R` and `ccall((:f, lib), R, (T, ...), a...)`), `const X = ...`,
struct definitions with their fields, function definitions (long and short form) and calls.
A form the checks need but cannot read (a @ccall argument with no `::Type`, a struct field
that is not `name::Type`, a type that is not a name with parameters) raises FormError, which
the checker reports: nothing is skipped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Tuple


class FormError(Exception):
    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = path, line, message


def call_parts(call):
    """(callee, argument_list or None) of a call_expression (a `do` block may follow it)."""
    children = code_children(call)
    argument_list = next((c for c in children[1:] if c.type == "argument_list"), None)
    return (children[0] if children else None), argument_list


def line_of(node) -> int:
    return node.start_point[0] + 1


def text(node) -> str:
    return node.text.decode("utf-8")


def walk(node) -> Iterator:
    """Every node below `node` (included), in source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def code_children(node) -> List:
    """The named children of `node` that are not comments."""
    return [c for c in node.named_children if c.type not in ("line_comment", "block_comment")]


def dotted_last(node) -> Optional[str]:
    """`name` for an identifier, the last name of `a.b.name`; None for anything else."""
    if node.type == "identifier":
        return text(node)
    if node.type == "field_expression":
        last = code_children(node)[-1]
        return text(last) if last.type == "identifier" else None
    return None


# ---------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------


@dataclass
class TypeExpr:
    """`Name{arg, ...}`; `name` keeps a module prefix (`LibEpComm.EpcPlan`); integer
    parameters (NTuple lengths) are kept as TypeExpr with `number` set."""

    name: str
    args: List["TypeExpr"] = field(default_factory=list)
    number: Optional[int] = None

    @property
    def base(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    def __str__(self) -> str:
        if self.number is not None:
            return str(self.number)
        return self.name + ("{" + ", ".join(map(str, self.args)) + "}" if self.args else "")


def is_dotted_name(node) -> bool:
    if node.type == "identifier":
        return True
    if node.type == "field_expression":
        parts = code_children(node)
        return len(parts) == 2 and is_dotted_name(parts[0]) and parts[1].type == "identifier"
    return False


def parse_int_literal(literal: str) -> Optional[int]:
    try:
        return int(literal.replace("_", ""), 0)
    except ValueError:
        return None


def type_expr(node, path: str) -> TypeExpr:
    """The type a node spells: `Name`, `Mod.Name`, `Name{T, ...}` or an integer parameter."""
    if node.type == "integer_literal":
        value = parse_int_literal(text(node))
        if value is not None:
            return TypeExpr(text(node), number=value)
    if is_dotted_name(node):
        return TypeExpr("".join(text(node).split()))
    if node.type == "parametrized_type_expression":
        parts = code_children(node)
        if len(parts) == 2 and is_dotted_name(parts[0]) and parts[1].type == "curly_expression":
            return TypeExpr("".join(text(parts[0]).split()), [type_expr(arg, path) for arg in code_children(parts[1])])
    raise FormError(path, line_of(node), f"expected a type, got {text(node)!r}")


# ---------------------------------------------------------------------------------------
# Foreign calls
# ---------------------------------------------------------------------------------------


@dataclass
class CallSite:
    """One foreign call: `@ccall` or `ccall`."""

    path: str
    line: int
    form: str  # "@ccall" or "ccall"
    function: str  # "" for a call through a function pointer
    library: str  # the library expression as written, "" for none
    arg_values: List[str]
    arg_types: List[TypeExpr]
    return_type: TypeExpr
    start: int  # byte span of the whole call, for "is this node part of a call site"
    stop: int
    varargs: bool = False


def arguments(argument_list) -> List[Tuple[object, bool]]:
    """(argument node, after the `;`) for every argument of an argument_list."""
    out, keywords = [], False
    for child in argument_list.children:
        if child.type == ";":
            keywords = True
        elif child.is_named and child.type not in ("line_comment", "block_comment"):
            out.append((child, keywords))
    return out


def parse_at_ccall(node, path: str) -> CallSite:
    """node is a macrocall_expression of `@ccall`."""
    line = line_of(node)
    body = [c for c in code_children(node) if c.type in ("macro_argument_list", "argument_list")]
    parts = code_children(body[0]) if body else []
    while parts and parts[0].type == "assignment":
        parts = parts[1:]  # options such as gc_safe=true
    if len(parts) != 1:
        raise FormError(path, line, "cannot parse the @ccall: expected `library.function(args...)::Return`")
    call = parts[0]
    if call.type != "typed_expression" or len(code_children(call)) != 2:
        raise FormError(path, line, f"@ccall {text(call).split('(')[0]}: missing ::ReturnType")
    call, return_node = code_children(call)
    if call.type != "call_expression":
        raise FormError(path, line, "cannot parse the @ccall: expected `library.function(args...)::Return`")
    callee, argument_list = call_parts(call)
    if argument_list is None:
        raise FormError(path, line, "cannot parse the @ccall: expected `library.function(args...)::Return`")
    if callee.type == "identifier":
        name, library = text(callee), ""
    elif callee.type == "field_expression" and code_children(callee)[-1].type == "identifier":
        name, library = text(code_children(callee)[-1]), text(code_children(callee)[0])
    else:
        name, library = "", text(callee)  # e.g. `$fptr(...)`: an indirect call
    values, types, varargs = [], [], False
    for argument, after_semicolon in arguments(argument_list):
        varargs |= after_semicolon
        if argument.type != "typed_expression" or len(code_children(argument)) != 2:
            raise FormError(path, line, f"@ccall {name}: argument {text(argument)!r} has no ::Type")
        value, jtype = code_children(argument)
        values.append(text(value))
        types.append(type_expr(jtype, path))
    return_type = type_expr(return_node, path)
    return CallSite(
        path, line, "@ccall", name, library, values, types, return_type, node.start_byte, node.end_byte, varargs
    )


CALLING_CONVENTIONS = {"cdecl", "stdcall", "fastcall", "thiscall", "llvmcall"}


def parse_ccall(node, path: str) -> CallSite:
    """node is a call_expression of `ccall`."""
    line = line_of(node)
    argument_list = call_parts(node)[1]
    parts = [a for a, _ in arguments(argument_list)] if argument_list is not None else []
    if len(parts) > 1 and text(parts[1]) in CALLING_CONVENTIONS:
        parts = parts[:1] + parts[2:]
    if len(parts) < 3:
        raise FormError(path, line, "ccall needs (function, library), return type and argument types")
    target = parts[0]
    name, library = text(target), ""
    if target.type == "tuple_expression":
        inner = code_children(target)
        name = text(inner[0]) if inner else ""
        library = text(inner[1]) if len(inner) > 1 else ""
    name = name.lstrip(":").strip('"')
    types_part = parts[2]
    if types_part.type not in ("tuple_expression", "parenthesized_expression"):
        raise FormError(path, line, f"ccall {name}: argument types must be a literal tuple")
    types = [type_expr(t, path) for t in code_children(types_part)]
    values = [text(p) for p in parts[3:]]
    return_type = type_expr(parts[1], path)
    return CallSite(path, line, "ccall", name, library, values, types, return_type, node.start_byte, node.end_byte)


def is_at_ccall(node) -> bool:
    if node.type != "macrocall_expression":
        return False
    macro = node.named_children[0] if node.named_children else None
    return macro is not None and macro.type == "macro_identifier" and text(macro) == "@ccall"


def call_sites(root, path: str) -> List[CallSite]:
    sites = []
    for node in walk(root):
        if is_at_ccall(node):
            sites.append(parse_at_ccall(node, path))
        elif (
            node.type == "call_expression" and call_parts(node)[0] is not None and text(call_parts(node)[0]) == "ccall"
        ):
            sites.append(parse_ccall(node, path))
    return sites


# ---------------------------------------------------------------------------------------
# Definitions and calls
# ---------------------------------------------------------------------------------------


@dataclass
class Const:
    name: str
    rhs: object  # the tree node of the value
    line: int


@dataclass
class StructDef:
    name: str
    mutable: bool
    fields: List[Tuple[str, TypeExpr, int]]  # name, type, line
    line: int


@dataclass
class FunctionDef:
    name: str  # as written: `f`, or `Base.close` for a method of another module's function
    params: List[str]
    line: int
    start: int
    stop: int  # byte span of the whole definition


def signature_call(node):
    """The call_expression of a definition's signature `f(x)`, `f(x)::T`, `f(x) where {T}`."""
    while node is not None and node.type in ("signature", "where_expression", "typed_expression"):
        children = code_children(node)
        node = children[0] if children else None
    return node if node is not None and node.type == "call_expression" else None


def is_definition_signature(call) -> bool:
    """Whether a call_expression is the signature of a function definition, not a call."""
    node = call
    while node.parent is not None and node.parent.type in ("where_expression", "typed_expression", "signature"):
        if node.parent.type == "signature":
            return True
        if code_children(node.parent)[0] != node:
            return False
        node = node.parent
    parent = node.parent
    return parent is not None and parent.type == "assignment" and code_children(parent)[0] == node


def positional(argument_list) -> List[str]:
    """The positional parameters (or arguments) of an argument_list: those before its `;`."""
    return [text(a) for a, keywords in arguments(argument_list) if not keywords]


def const_definition(node):
    """(name, value node) of `const NAME = value`, else None."""
    assignment = next((c for c in code_children(node) if c.type == "assignment"), None)
    if assignment is None:
        return None
    parts = code_children(assignment)
    if len(parts) < 3 or parts[0].type != "identifier":
        return None
    return text(parts[0]), parts[-1]


def struct_definition(node, path: str) -> StructDef:
    children = code_children(node)
    head = next(c for c in children if c.type == "type_head")
    name_node = code_children(head)[0]
    while name_node.type in ("binary_expression", "parametrized_type_expression"):  # S{T} <: Super
        name_node = code_children(name_node)[0]
    name = text(name_node)
    fields = []
    for member in children[children.index(head) + 1 :]:
        if member.type == "string_literal":
            continue  # a field docstring
        parts = code_children(member) if member.type == "typed_expression" else []
        if len(parts) != 2 or parts[0].type != "identifier":
            raise FormError(path, line_of(member), f"struct {name}: cannot parse the field {text(member)!r}")
        fields.append((text(parts[0]), type_expr(parts[1], path), line_of(member)))
    mutable = any(c.type == "mutable" for c in node.children)
    return StructDef(name, mutable, fields, line_of(node))


def definitions(root, path: str):
    """The constants, structs and functions defined anywhere in the tree."""
    consts: List[Const] = []
    structs: List[StructDef] = []
    functions: List[FunctionDef] = []
    for node in walk(root):
        if node.type == "const_statement":
            found = const_definition(node)
            if found is not None:
                consts.append(Const(found[0], found[1], line_of(node)))
        elif node.type == "struct_definition":
            structs.append(struct_definition(node, path))
        elif node.type in ("function_definition", "assignment"):
            first = code_children(node)[0] if code_children(node) else None
            short_forms = ("call_expression", "where_expression", "typed_expression")
            if first is None or (node.type == "assignment" and first.type not in short_forms):
                continue
            call = signature_call(first)
            if call is None:
                continue
            callee, argument_list = call_parts(call)
            if argument_list is None:
                continue
            functions.append(
                FunctionDef(
                    "".join(text(callee).split()),
                    positional(argument_list),
                    line_of(node),
                    node.start_byte,
                    node.end_byte,
                )
            )
    return consts, structs, functions


@dataclass
class Call:
    """A call `f(args...)` or `Mod.f(args...)`: `name` is `f`; `arguments` are the nodes of
    the argument list with whether they follow its `;`."""

    name: str
    line: int
    start: int
    arguments: List[Tuple[object, bool]]
    node: object


def calls(root) -> List[Call]:
    """Every call of a named function in the tree, besides the signatures of definitions."""
    out = []
    for node in walk(root):
        if node.type != "call_expression":
            continue
        callee, argument_list = call_parts(node)
        if callee is None or argument_list is None:
            continue
        name = dotted_last(callee)
        if name is None or is_definition_signature(node):
            continue
        out.append(Call(name, line_of(node), node.start_byte, arguments(argument_list), node))
    return out
