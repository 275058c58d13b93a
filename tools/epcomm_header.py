#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A small parser for epcomm.h, the library's public C ABI header (Python 3 standard library).

It understands exactly the C subset that ARCHITECTURE.md section 2 allows in the header:
object-like #define constants (integer expressions), initializer macros (a braced list, a
function-like template `NAME(T) {...}`, or an object-like use of such a template), #include,
#if/#ifdef conditionals,
scalar and function-pointer typedefs, opaque struct typedefs, `typedef struct X {...} X;`
with fixed-width fields, fixed arrays and function-pointer fields, and `EPC_API` function
declarations, each with the comment right above it (`Function.doc`). Anything else raises HeaderError naming the file and line, so that a header
change this parser does not model is noticed instead of silently missing from the ABI
snapshot or from generated bindings.

Conditionals are evaluated the way a C (not C++) compiler on a non-Windows platform sees
them; pass `predefined` to model another view.

Usage as a script: `epcomm_header.py [HEADER]` prints the parsed model as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

DEFAULT_HEADER = Path(__file__).resolve().parent.parent / "capi/include/epcomm/epcomm.h"

# Fixed-width integer types an integer cast in a constant expression may use, with
# (bits, signed). Used to wrap values exactly as the C compiler does.
INTEGER_CASTS: Dict[str, Tuple[int, bool]] = {
    "int8_t": (8, True),
    "int16_t": (16, True),
    "int32_t": (32, True),
    "int64_t": (64, True),
    "uint8_t": (8, False),
    "uint16_t": (16, False),
    "uint32_t": (32, False),
    "uint64_t": (64, False),
    "size_t": (64, False),
}

# Base types a declaration may use besides the header's own typedefs. `char` is allowed
# for strings and fixed name buffers; `void` for pointers and empty parameter lists.
BUILTIN_TYPES = set(INTEGER_CASTS) | {
    "void",
    "char",
    "float",
    "double",
    "intptr_t",
    "uintptr_t",
    "ptrdiff_t",
}

# Spelled out so the error says why, rather than "unknown type": section 2 of the
# architecture forbids these in the ABI.
FORBIDDEN_TYPE_WORDS = {
    "int",
    "long",
    "short",
    "unsigned",
    "signed",
    "bool",
    "_Bool",
    "enum",
    "union",
    "volatile",
    "restrict",
    "static",
    "inline",
    "extern",
    "register",
}


class HeaderError(Exception):
    """Something in the header this parser does not understand (or that is malformed)."""

    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line
        self.message = message


# ---------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------
# Lexing: comments, logical lines, tokens
# ---------------------------------------------------------------------------------------


def strip_comments(text: str, path: str) -> str:
    """Blank out comments, keeping newlines (so line numbers stay right) and string literals
    (so a `/*` inside a string is not a comment)."""
    out: List[str] = []
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise HeaderError(path, line, "unterminated /* comment")
            chunk = text[i : end + 2]
            out.append(re.sub(r"[^\n]", " ", chunk))
            line += chunk.count("\n")
            i = end + 2
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                if text[j] == "\n":
                    raise HeaderError(path, line, "unterminated string or character literal")
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        else:
            if c == "\n":
                line += 1
            out.append(c)
            i += 1
    return "".join(out)


def comments_by_end_line(text: str) -> Dict[int, str]:
    """Every /* */ comment that ends a line, keyed by that line's number, as plain text: the
    delimiters and each line's leading "*" removed, the lines kept."""
    result: Dict[int, str] = {}
    for m in re.finditer(r"/\*(.*?)\*/[ \t]*$", text, flags=re.S | re.M):
        end_line = text.count("\n", 0, m.end()) + 1
        lines = [re.sub(r"^\s*\* ?", "", raw) if i else raw.lstrip() for i, raw in enumerate(m.group(1).split("\n"))]
        result[end_line] = "\n".join(line.rstrip() for line in lines).strip("\n")
    return result


def logical_lines(text: str) -> List[Tuple[int, str]]:
    """Join backslash-continued lines; each result carries its first physical line number."""
    result: List[Tuple[int, str]] = []
    pending: List[str] = []
    start = 0
    for number, raw in enumerate(text.split("\n"), start=1):
        if not pending:
            start = number
        if raw.rstrip().endswith("\\"):
            pending.append(raw.rstrip()[:-1])
            continue
        pending.append(raw)
        result.append((start, " ".join(pending)))
        pending = []
    if pending:
        result.append((start, " ".join(pending)))
    return result


CODE_TOKEN = re.compile(r"\s*(?:([A-Za-z_]\w*)|(0[xX][0-9A-Fa-f]+[uUlL]*|\d+[uUlL]*)|([(){}\[\];,*:]))")
EXPR_TOKEN = re.compile(
    r"\s*(?:([A-Za-z_]\w*)|(0[xX][0-9A-Fa-f]+[uUlL]*|\d+[uUlL]*)"
    r"|(<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%()~!<>&|^?:]))"
)


@dataclass
class Token:
    text: str
    line: int


def tokenize_code(line_number: int, text: str, path: str) -> List[Token]:
    tokens: List[Token] = []
    pos = 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = CODE_TOKEN.match(text, pos)
        if not m:
            bad = text[pos:].strip()[:20]
            raise HeaderError(path, line_number, f"unexpected text in a declaration: {bad!r}")
        tokens.append(Token(m.group(m.lastindex), line_number))
        pos = m.end()
    return tokens


# ---------------------------------------------------------------------------------------
# Integer constant expressions (for #define values and #if conditions)
# ---------------------------------------------------------------------------------------


def wrap_integer(value: int, bits: int, signed: bool) -> int:
    value &= (1 << bits) - 1
    if signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


class ExpressionEvaluator:
    """Recursive descent over C's integer operators. `resolve(name)` gives an identifier's
    value (or raises). Values are exact Python integers; casts wrap like C. The compiler
    probe in abi_dump.py cross-checks every result, so an approximation here cannot reach
    the snapshot unnoticed."""

    # Binary operators by precedence level, loosest first.
    LEVELS: Sequence[Sequence[str]] = (
        ("||",),
        ("&&",),
        ("|",),
        ("^",),
        ("&",),
        ("==", "!="),
        ("<", "<=", ">", ">="),
        ("<<", ">>"),
        ("+", "-"),
        ("*", "/", "%"),
    )

    def __init__(self, text: str, line: int, path: str, resolve: Callable[[str], int]):
        self.line, self.path, self.resolve = line, path, resolve
        self.tokens: List[str] = []
        pos = 0
        while pos < len(text):
            if not text[pos:].strip():
                break
            m = EXPR_TOKEN.match(text, pos)
            if not m:
                self.fail(f"cannot parse {text[pos:].strip()!r} in the expression {text.strip()!r}")
            self.tokens.append(m.group(m.lastindex))
            pos = m.end()
        self.pos = 0
        self.text = text.strip()

    def fail(self, message: str) -> None:
        raise HeaderError(self.path, self.line, message)

    def peek(self, offset: int = 0) -> Optional[str]:
        i = self.pos + offset
        return self.tokens[i] if i < len(self.tokens) else None

    def take(self, expected: Optional[str] = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            self.fail(f"expected {expected or 'more'} in the expression {self.text!r}")
        self.pos += 1
        return token  # type: ignore[return-value]

    def evaluate(self) -> int:
        if not self.tokens:
            self.fail("empty expression")
        value = self.conditional()
        if self.peek() is not None:
            self.fail(f"unexpected {self.peek()!r} in the expression {self.text!r}")
        return value

    def conditional(self) -> int:
        cond = self.binary(0)
        if self.peek() == "?":
            self.take("?")
            yes = self.conditional()
            self.take(":")
            no = self.conditional()
            return yes if cond else no
        return cond

    def binary(self, level: int) -> int:
        if level == len(self.LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self.LEVELS[level]:
            op = self.take()
            right = self.binary(level + 1)
            left = self.apply(op, left, right)
        return left

    def apply(self, op: str, a: int, b: int) -> int:
        if op in ("/", "%") and b == 0:
            self.fail(f"division by zero in {self.text!r}")
        if op == "/":
            quotient = abs(a) // abs(b)  # C truncates toward zero
            return quotient if (a < 0) == (b < 0) else -quotient
        if op == "%":
            return a - b * self.apply("/", a, b)
        return {
            "||": lambda: int(bool(a) or bool(b)),
            "&&": lambda: int(bool(a) and bool(b)),
            "|": lambda: a | b,
            "^": lambda: a ^ b,
            "&": lambda: a & b,
            "==": lambda: int(a == b),
            "!=": lambda: int(a != b),
            "<": lambda: int(a < b),
            "<=": lambda: int(a <= b),
            ">": lambda: int(a > b),
            ">=": lambda: int(a >= b),
            "<<": lambda: a << b,
            ">>": lambda: a >> b,
            "+": lambda: a + b,
            "-": lambda: a - b,
            "*": lambda: a * b,
        }[op]()

    def unary(self) -> int:
        token = self.peek()
        if token in ("+", "-", "~", "!"):
            self.take()
            value = self.unary()
            return {"+": value, "-": -value, "~": ~value, "!": int(not value)}[token]
        if token == "(" and self.peek(1) in INTEGER_CASTS and self.peek(2) == ")":
            self.take("(")
            bits, signed = INTEGER_CASTS[self.take()]
            self.take(")")
            return wrap_integer(self.unary(), bits, signed)
        return self.primary()

    def primary(self) -> int:
        token = self.take()
        if token == "(":
            value = self.conditional()
            self.take(")")
            return value
        if token[0].isdigit():
            digits = token.rstrip("uUlL")
            if digits.lower().startswith("0x"):
                return int(digits, 16)
            return int(digits, 8) if len(digits) > 1 and digits[0] == "0" else int(digits)
        if token[0].isalpha() or token[0] == "_":
            return self.resolve(token)
        self.fail(f"unexpected {token!r} in the expression {self.text!r}")
        return 0  # unreachable


# ---------------------------------------------------------------------------------------
# The parser
# ---------------------------------------------------------------------------------------


@dataclass
class _Branch:
    """One level of #if nesting."""

    parent_active: bool
    active: bool  # this branch is being taken
    taken: bool  # some branch of this #if has been taken already
    line: int
    seen_else: bool = False


class _Parser:
    def __init__(self, path: str, text: str, predefined: Sequence[str]):
        self.path = path
        self.text = text
        self.header = Header(path=path)
        self.defined = set(predefined)  # macro names visible to #if defined(...)
        self.branches: List[_Branch] = []
        self.tokens: List[Token] = []

    # -- preprocessing --------------------------------------------------------------------

    def active(self) -> bool:
        return all(b.active for b in self.branches)

    def fail(self, line: int, message: str) -> None:
        raise HeaderError(self.path, line, message)

    def run(self) -> Header:
        for line, text in logical_lines(strip_comments(self.text, self.path)):
            stripped = text.strip()
            if stripped.startswith("#"):
                self.directive(line, stripped[1:].strip())
            elif stripped and self.active():
                self.tokens.extend(tokenize_code(line, stripped, self.path))
        if self.branches:
            self.fail(self.branches[-1].line, "#if without a matching #endif")
        self.declarations()
        docs = comments_by_end_line(self.text)
        for function in self.header.functions.values():
            function.doc = docs.get(function.line - 1)
        return self.header

    def directive(self, line: int, text: str) -> None:
        m = re.match(r"([a-z]+)\b\s*(.*)$", text)
        if not m:
            self.fail(line, f"unknown preprocessor directive #{text}")
        word, rest = m.group(1), m.group(2).strip()
        if word in ("if", "ifdef", "ifndef"):
            parent = self.active()
            if word == "if":
                taken = bool(self.condition(line, rest)) if parent else False
            else:
                name = self.macro_name(line, rest)
                taken = (name in self.defined) == (word == "ifdef")
            self.branches.append(_Branch(parent, parent and taken, taken, line))
        elif word in ("elif", "else", "endif"):
            if not self.branches:
                self.fail(line, f"#{word} without #if")
            branch = self.branches[-1]
            if word == "endif":
                self.branches.pop()
                return
            if branch.seen_else:
                self.fail(line, f"#{word} after #else")
            if word == "else":
                branch.seen_else = True
                take = not branch.taken
            else:
                take = not branch.taken and branch.parent_active and bool(self.condition(line, rest))
            branch.active = branch.parent_active and take
            branch.taken = branch.taken or take
        elif word == "include":
            m = re.fullmatch(r'<([^>]+)>|"([^"]+)"', rest)
            if not m:
                self.fail(line, f"cannot parse #include {rest}")
            self.header.includes.append(Include(m.group(1) or m.group(2), m.group(1) is not None, self.active(), line))
        elif word == "define":
            if self.active():
                self.define(line, rest)
        elif not self.active():
            pass  # directives in a branch the C view skips need not be understood
        else:
            self.fail(line, f"unsupported preprocessor directive #{word}")

    def macro_name(self, line: int, text: str) -> str:
        if not re.fullmatch(r"[A-Za-z_]\w*", text):
            self.fail(line, f"expected a macro name, got {text!r}")
        return text

    def condition(self, line: int, text: str) -> int:
        # defined(X) / defined X first, then C's rule: other identifiers are 0.
        def replace(m: "re.Match[str]") -> str:
            return "1" if (m.group(1) or m.group(2)) in self.defined else "0"

        text = re.sub(r"\bdefined\s*(?:\(\s*([A-Za-z_]\w*)\s*\)|([A-Za-z_]\w*))", replace, text)

        def resolve(name: str) -> int:
            constant = self.header.constants.get(name)
            return constant.value if constant else 0

        return ExpressionEvaluator(text, line, self.path, resolve).evaluate()

    def define(self, line: int, text: str) -> None:
        m = re.match(r"([A-Za-z_]\w*)(\(?)\s*(.*)$", text)
        if not m:
            self.fail(line, f"cannot parse #define {text}")
        name, paren, body = m.group(1), m.group(2), m.group(3).strip()
        params: Optional[List[str]] = None
        if paren:
            # Only an initializer template is allowed: NAME(T) {...}.
            pm = re.match(r"([^)]*)\)\s*(.*)$", body)
            if not pm or not pm.group(2).startswith("{"):
                self.fail(
                    line,
                    f"function-like macro {name}(...) is not supported in the C ABI header "
                    "(only an initializer template NAME(T) {...})",
                )
            params = [p.strip() for p in pm.group(1).split(",") if p.strip()]  # type: ignore[union-attr]
            for p in params:
                self.check_identifier(p, line)
            body = pm.group(2).strip()  # type: ignore[union-attr]
        if name in self.defined:
            self.fail(line, f"macro {name} is defined twice")
        self.defined.add(name)
        use = re.fullmatch(r"([A-Za-z_]\w*)\s*\((.*)\)", body)
        template = self.header.macros.get(use.group(1)) if use else None
        if body == "":
            self.header.macros[name] = Macro(name, "empty", body, line)
        elif body.startswith("__attribute__"):
            self.header.macros[name] = Macro(name, "attribute", body, line)
        elif body.startswith("{"):
            if body.count("{") != body.count("}"):
                self.fail(line, f"unbalanced braces in the initializer macro {name}")
            self.header.macros[name] = Macro(name, "initializer", body, line, params)
        elif template is not None and template.kind == "initializer" and template.params is not None:
            args = [a.strip() for a in use.group(2).split(",")]  # type: ignore[union-attr]
            if len(args) != len(template.params):
                self.fail(
                    line,
                    f"{name} passes {len(args)} argument(s) to {template.name}, which takes {len(template.params)}",
                )
            self.header.macros[name] = Macro(name, "initializer", body, line)
        else:

            def resolve(identifier: str) -> int:
                constant = self.header.constants.get(identifier)
                if constant is None:
                    self.fail(
                        line,
                        f"{name} uses {identifier}, which is not an integer constant defined earlier in the header",
                    )
                return constant.value  # type: ignore[union-attr]

            value = ExpressionEvaluator(body, line, self.path, resolve).evaluate()
            self.header.constants[name] = Constant(name, value, body, line)

    # -- declarations -----------------------------------------------------------------------

    def declarations(self) -> None:
        statement: List[Token] = []
        depth = 0
        for token in self.tokens:
            statement.append(token)
            if token.text in "({[":
                depth += 1
            elif token.text in ")}]":
                depth -= 1
                if depth < 0:
                    self.fail(token.line, f"unbalanced {token.text!r}")
            elif token.text == ";" and depth == 0:
                self.statement(statement[:-1], token.line)
                statement = []
        if statement:
            self.fail(statement[0].line, "declaration without a terminating ';'")

    def statement(self, tokens: List[Token], end_line: int) -> None:
        if not tokens:
            self.fail(end_line, "empty declaration ';'")
        line = tokens[0].line
        words = [t.text for t in tokens]
        if words[0] == "typedef":
            self.typedef(tokens[1:], line)
            return
        attributes = 0
        while attributes < len(words) and self.is_attribute_macro(words[attributes]):
            attributes += 1
        if attributes == 0:
            self.fail(
                line,
                f"unsupported declaration starting with {' '.join(words[:4])!r} "
                "(expected a typedef or an EPC_API function)",
            )
        declared = self.declarator(tokens[attributes:], line, allow_function=True)
        if declared.function is None or declared.is_function_pointer:
            self.fail(line, "only function declarations may carry EPC_API")
        name = declared.name
        if name in self.header.functions:
            self.fail(line, f"function {name} is declared twice")
        self.header.functions[name] = Function(name, declared.function.return_type, declared.function.params, line)

    def is_attribute_macro(self, word: str) -> bool:
        macro = self.header.macros.get(word)
        return macro is not None and macro.kind in ("attribute", "empty")

    def typedef(self, tokens: List[Token], line: int) -> None:
        words = [t.text for t in tokens]
        if len(words) >= 2 and words[0] == "struct":
            tag = words[1]
            self.check_identifier(tag, line)
            if len(words) == 3:
                if words[2] != tag:
                    self.fail(line, f"typedef struct {tag} {words[2]}: the tag and the typedef name must be the same")
                self.add_typedef(Typedef(tag, "opaque", None, None, line))
                return
            if len(words) < 3 or words[2] != "{":
                self.fail(line, f"cannot parse typedef struct {tag} ...")
            close = self.matching(tokens, 2)
            after = words[close + 1 :]
            if after != [tag]:
                self.fail(
                    line, f"typedef struct {tag} {{...}} must be followed by exactly '{tag};', got {' '.join(after)!r}"
                )
            if tag in self.header.typedefs:
                self.fail(line, f"{tag} is already declared (opaque structs cannot be completed)")
            fields = self.struct_fields(tag, tokens[3:close], line)
            self.header.structs[tag] = Struct(tag, fields, line)
            self.add_typedef(Typedef(tag, "struct", None, None, line))
            return
        declared = self.declarator(tokens, line, allow_function=False)
        if declared.array_tokens is not None:
            self.fail(line, f"array typedef {declared.name} is not supported")
        if declared.function is not None:
            self.add_typedef(
                Typedef(declared.name, "function_pointer", declared.function.spelling(), declared.function, line)
            )
        else:
            self.add_typedef(Typedef(declared.name, "alias", declared.type, None, line))

    def add_typedef(self, typedef: Typedef) -> None:
        if typedef.name in self.header.typedefs or typedef.name in BUILTIN_TYPES:
            self.fail(typedef.line, f"type {typedef.name} is declared twice")
        self.header.typedefs[typedef.name] = typedef

    def matching(self, tokens: List[Token], open_index: int) -> int:
        pairs = {"(": ")", "{": "}", "[": "]"}
        opener = tokens[open_index].text
        depth = 0
        for i in range(open_index, len(tokens)):
            if tokens[i].text == opener:
                depth += 1
            elif tokens[i].text == pairs[opener]:
                depth -= 1
                if depth == 0:
                    return i
        self.fail(tokens[open_index].line, f"unbalanced {opener!r}")
        return -1  # unreachable

    def struct_fields(self, struct: str, tokens: List[Token], line: int) -> List[Field]:
        fields: List[Field] = []
        current: List[Token] = []
        depth = 0
        for token in tokens:
            if token.text in "([{":
                depth += 1
            elif token.text in ")]}":
                depth -= 1
            if token.text == ";" and depth == 0:
                fields.append(self.struct_field(struct, current, token.line))
                current = []
            else:
                current.append(token)
        if current:
            self.fail(current[0].line, f"field of {struct} without a terminating ';'")
        if not fields:
            self.fail(line, f"struct {struct} has no fields")
        names = set()
        for f in fields:
            if f.name in names:
                self.fail(f.line, f"{struct}.{f.name} is declared twice")
            names.add(f.name)
        return fields

    def struct_field(self, struct: str, tokens: List[Token], end_line: int) -> Field:
        if not tokens:
            self.fail(end_line, f"empty field declaration in {struct}")
        line = tokens[0].line
        for token in tokens:
            if token.text in (":", "{"):
                self.fail(
                    line,
                    f"unsupported field syntax in {struct} near {token.text!r} "
                    "(bitfields and nested structs are not allowed)",
                )
        declared = self.declarator(tokens, line, allow_function=False)
        if declared.name is None:
            self.fail(line, f"unnamed field in {struct}")
        length: Optional[int] = None
        expr: Optional[str] = None
        if declared.array_tokens is not None:
            expr = " ".join(t.text for t in declared.array_tokens)

            def resolve(name: str) -> int:
                constant = self.header.constants.get(name)
                if constant is None:
                    self.fail(
                        line, f"array length of {struct}.{declared.name} uses {name}, which is not an integer constant"
                    )
                return constant.value  # type: ignore[union-attr]

            length = ExpressionEvaluator(expr, line, self.path, resolve).evaluate()
            if length <= 0:
                self.fail(line, f"array length of {struct}.{declared.name} is {length}")
        type_spelling = declared.function.spelling() if declared.function is not None else declared.type
        return Field(declared.name, type_spelling, length, expr, declared.function, line)

    def check_identifier(self, word: str, line: int) -> None:
        if not re.fullmatch(r"[A-Za-z_]\w*", word):
            self.fail(line, f"expected an identifier, got {word!r}")

    # A declarator: specifiers, pointers, then a name, optionally followed by an array
    # length, a parameter list (functions), or `(*name)(params)` (function pointers).
    @dataclass
    class Declared:
        name: Optional[str]
        type: str
        array_tokens: Optional[List[Token]] = None
        function: Optional[FunctionType] = None
        is_function_pointer: bool = False

    def base_type(self, tokens: List[Token], line: int) -> Tuple[str, int]:
        """Parse `[const] base [const] {* [const]}`; return its spelling and the next index."""
        i = 0
        const = False
        base: Optional[str] = None
        while i < len(tokens):
            word = tokens[i].text
            if word == "const":
                const = True
            elif word in FORBIDDEN_TYPE_WORDS:
                self.fail(
                    line,
                    f"'{word}' is not allowed in the C ABI (ARCHITECTURE.md section 2: "
                    "fixed-width types only, no enums, unions or bool)",
                )
            elif base is None and word == "struct":
                if i + 1 >= len(tokens):
                    self.fail(line, "'struct' without a tag")
                tag = tokens[i + 1].text
                if tag not in self.header.typedefs:
                    self.fail(line, f"struct {tag} is not declared before its use")
                base = f"struct {tag}"
                i += 1
            elif base is None and re.fullmatch(r"[A-Za-z_]\w*", word):
                if word not in BUILTIN_TYPES and word not in self.header.typedefs:
                    self.fail(
                        line, f"unknown type {word!r} (not a fixed-width C type and not declared earlier in the header)"
                    )
                base = word
            else:
                break
            i += 1
        if base is None:
            self.fail(line, "a declaration without a type")
        spelling = f"const {base}" if const else base
        while i < len(tokens) and tokens[i].text in ("*", "const"):
            spelling += "*" if tokens[i].text == "*" else " const"
            i += 1
        return spelling, i  # type: ignore[return-value]

    def declarator(
        self, tokens: List[Token], line: int, allow_function: bool, allow_unnamed: bool = False
    ) -> "_Parser.Declared":
        type_spelling, i = self.base_type(tokens, line)
        rest = tokens[i:]
        words = [t.text for t in rest]
        if not rest:
            if allow_unnamed:
                return self.Declared(None, type_spelling)
            self.fail(line, f"declaration of type {type_spelling} without a name")
        # (*name)(params): a function pointer.
        if words[:2] == ["(", "*"]:
            if len(words) < 5 or words[3] != ")" or words[4] != "(":
                self.fail(line, f"cannot parse the function-pointer declarator {' '.join(words)!r}")
            name = words[2]
            self.check_identifier(name, line)
            close = self.matching(rest, 4)
            if close != len(rest) - 1:
                self.fail(line, f"unexpected {words[close + 1]!r} after the function pointer {name}")
            params = self.parameters(rest[5:close], line)
            return self.Declared(
                name, type_spelling, None, FunctionType(type_spelling, params), is_function_pointer=True
            )
        name = words[0]
        self.check_identifier(name, line)
        if name in FORBIDDEN_TYPE_WORDS:
            self.fail(line, f"'{name}' is not allowed in the C ABI")
        if len(words) == 1:
            return self.Declared(name, type_spelling)
        if words[1] == "[":
            close = self.matching(rest, 1)
            if close != len(rest) - 1:
                self.fail(
                    line,
                    f"unexpected {words[close + 1]!r} after {name}[...] (multidimensional arrays are not supported)",
                )
            if close == 2:
                self.fail(line, f"array {name}[] without a length")
            return self.Declared(name, type_spelling, rest[2:close])
        if words[1] == "(" and allow_function:
            close = self.matching(rest, 1)
            if close != len(rest) - 1:
                self.fail(line, f"unexpected {words[close + 1]!r} after the parameters of {name}")
            params = self.parameters(rest[2:close], line)
            return self.Declared(name, type_spelling, None, FunctionType(type_spelling, params))
        if words[1] == ",":
            self.fail(line, "several declarators in one declaration are not supported")
        self.fail(line, f"cannot parse the declaration of {name}: unexpected {words[1]!r}")
        raise AssertionError("unreachable")

    def parameters(self, tokens: List[Token], line: int) -> List[Param]:
        if not tokens:
            self.fail(line, "empty parameter list: write (void) so C sees a prototype")
        if [t.text for t in tokens] == ["void"]:
            return []
        params: List[Param] = []
        current: List[Token] = []
        depth = 0
        for token in tokens + [Token(",", line)]:
            if token.text in "([":
                depth += 1
            elif token.text in ")]":
                depth -= 1
            if token.text == "," and depth == 0:
                if not current:
                    self.fail(line, "empty parameter")
                declared = self.declarator(current, current[0].line, allow_function=False, allow_unnamed=True)
                if declared.array_tokens is not None:
                    self.fail(line, f"array parameter {declared.name}: use a pointer")
                ptype = declared.function.spelling() if declared.function is not None else declared.type
                if ptype == "void":
                    self.fail(line, "a 'void' parameter next to others")
                params.append(Param(declared.name, ptype))
                current = []
            else:
                current.append(token)
        return params


def parse_header(path: "str | Path", predefined: Sequence[str] = ()) -> Header:
    """Parse the header at `path`. Raises HeaderError on anything not understood."""
    path = str(path)
    with open(path, encoding="utf-8") as handle:
        return parse_header_text(handle.read(), path, predefined)


def parse_header_text(text: str, path: str = "<header>", predefined: Sequence[str] = ()) -> Header:
    return _Parser(path, text, predefined).run()


def main(argv: Sequence[str]) -> int:
    path = argv[1] if len(argv) > 1 else str(DEFAULT_HEADER)
    try:
        header = parse_header(path)
    except HeaderError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    json.dump(header.to_json(), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
