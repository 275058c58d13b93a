# SPDX-License-Identifier: Apache-2.0
"""Just enough Julia syntax for check_julia.py (Python 3 standard library only).

No Julia runs on the project's machines, so the binding is checked statically. This module
turns a .jl file into tokens (comments dropped, strings and chars kept as single tokens, string
interpolation `$(...)` lexed as code), tracks block structure (`function ... end` and friends),
and parses the few forms the checks need: type expressions (`Ptr{NTuple{4, Int64}}`),
`@ccall lib.f(a::T, ...)::R`, `ccall((:f, lib), R, (T,...), a...)`, `const X = ...`,
`struct` definitions and function definitions. Anything it cannot parse is reported, not
skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple


class JuliaSyntaxError(Exception):
    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = path, line, message


@dataclass
class Token:
    kind: str  # ident, keyword, number, string, char, op, macro, newline
    text: str
    line: int
    space_before: bool = False


KEYWORDS = {
    "abstract",
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
    "mutable",
    "primitive",
    "quote",
    "return",
    "struct",
    "try",
    "type",
    "using",
    "while",
}
BLOCK_OPENERS = {
    "function",
    "macro",
    "module",
    "baremodule",
    "struct",
    "if",
    "for",
    "while",
    "let",
    "begin",
    "try",
    "do",
    "quote",
}
OPERATORS = sorted(
    """
    ::= ... === !== <<= >>= .+= -> => == != <= >= && || <: >: :: .. += -= *= /= |= &= ^= << >> |> <| ÷ ≠ ≤ ≥
    + - * / \\ ^ % & | ! ~ < > = . , ; : ? $ @ ( ) [ ] { } '
""".split(),
    key=len,
    reverse=True,
)
IDENT_START = re.compile(r"[A-Za-z_\u00a0-\uffff]")
IDENT_REST = re.compile(r"[A-Za-z0-9_!\u00a0-\uffff]*")
NUMBER = re.compile(r"0x[0-9A-Fa-f_]+|0b[01_]+|0o[0-7_]+|(\d[\d_]*\.?[\d_]*|\.\d[\d_]*)([eEf][-+]?\d+)?")


class Lexer:
    def __init__(self, text: str, path: str):
        self.text, self.path = text, path
        self.pos, self.line = 0, 1
        self.tokens: List[Token] = []

    def fail(self, message: str) -> None:
        raise JuliaSyntaxError(self.path, self.line, message)

    def emit(self, kind: str, text: str, line: int, space: bool) -> None:
        self.tokens.append(Token(kind, text, line, space))

    def run(self) -> List[Token]:
        self.code(stop_at_paren=False)
        return self.tokens

    def code(self, stop_at_paren: bool) -> None:
        """Lex code until the end (or, inside `$(...)`, until the `)` closing it)."""
        depth = 0
        text = self.text
        space = True
        while self.pos < len(text):
            c = text[self.pos]
            if c == "\n":
                self.emit("newline", "\n", self.line, space)
                self.line += 1
                self.pos += 1
                space = True
                continue
            if c in " \t\r":
                self.pos += 1
                space = True
                continue
            if text.startswith("#=", self.pos):
                self.block_comment()
                space = True
                continue
            if c == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
                space = True
                continue
            start_line, start = self.line, self.pos
            if c == '"' or c == "`":
                self.string(c, interpolate=True)
                self.emit("string", text[start : self.pos], start_line, space)
            elif c == "'" and self.is_char_literal(space):
                self.char_literal()
                self.emit("char", text[start : self.pos], start_line, space)
            elif IDENT_START.match(c):
                m = IDENT_REST.match(text, self.pos + 1)
                word = text[self.pos : m.end()]
                if word.endswith("!") and text[m.end() : m.end() + 1] == "=":
                    word = word[:-1]  # `a!=b` is `a != b`
                self.pos += len(word)
                if self.pos < len(text) and text[self.pos] == '"':  # raw"...", r"...", b"..."
                    self.string('"', interpolate=False)
                    self.emit("string", text[start : self.pos], start_line, space)
                else:
                    self.emit("keyword" if word in KEYWORDS else "ident", word, start_line, space)
            elif c == "@" and self.pos + 1 < len(text) and IDENT_START.match(text[self.pos + 1]):
                m = IDENT_REST.match(text, self.pos + 2)
                self.emit("macro", text[self.pos : m.end()], start_line, space)
                self.pos = m.end()
            elif c.isdigit() or (c == "." and self.pos + 1 < len(text) and text[self.pos + 1].isdigit()):
                m = NUMBER.match(text, self.pos)
                self.emit("number", m.group(0), start_line, space)
                self.pos = m.end()
            else:
                for op in OPERATORS:
                    if text.startswith(op, self.pos):
                        break
                else:
                    self.fail(f"unexpected character {c!r}")
                if stop_at_paren and op == ")" and depth == 0:
                    self.pos += 1
                    return
                depth += {"(": 1, ")": -1}.get(op, 0)
                self.emit("op", op, start_line, space)
                self.pos += len(op)
            space = False
        if stop_at_paren:
            self.fail("unterminated $( in a string")

    def is_char_literal(self, space: bool) -> bool:
        if not self.tokens or space:
            return True
        previous = self.tokens[-1]
        return not (
            previous.kind in ("ident", "number", "string", "char") or previous.text in (")", "]", "}", "'", "end")
        )

    def block_comment(self) -> None:
        depth = 0
        while self.pos < len(self.text):
            if self.text.startswith("#=", self.pos):
                depth += 1
                self.pos += 2
            elif self.text.startswith("=#", self.pos):
                depth -= 1
                self.pos += 2
                if depth == 0:
                    return
            else:
                if self.text[self.pos] == "\n":
                    self.line += 1
                self.pos += 1
        self.fail("unterminated #= comment")

    def string(self, quote: str, interpolate: bool) -> None:
        text = self.text
        delimiter = quote * 3 if text.startswith(quote * 3, self.pos) else quote
        start = self.line
        self.pos += len(delimiter)
        while self.pos < len(text):
            if text.startswith(delimiter, self.pos):
                self.pos += len(delimiter)
                return
            c = text[self.pos]
            if c == "\\":
                if text[self.pos + 1 : self.pos + 2] == "\n":
                    self.line += 1
                self.pos += 2
                continue
            if c == "\n":
                self.line += 1
            if interpolate and c == "$" and text[self.pos + 1 : self.pos + 2] == "(":
                self.pos += 2
                saved = self.tokens
                self.tokens = []
                self.code(stop_at_paren=True)  # checked for syntax, tokens not kept
                self.tokens = saved
                continue
            self.pos += 1
        raise JuliaSyntaxError(self.path, start, "unterminated string")

    def char_literal(self) -> None:
        m = re.compile(r"'(\\.[^']*|[^'\\\n])'").match(self.text, self.pos)
        if not m:
            self.fail("cannot parse a character literal")
        self.pos = m.end()


def tokenize(text: str, path: str) -> List[Token]:
    return Lexer(text, path).run()


# ---------------------------------------------------------------------------------------
# Block structure
# ---------------------------------------------------------------------------------------


@dataclass
class Block:
    keyword: str
    start: int  # token index of the keyword
    end: int = -1  # token index of its `end`


def blocks(tokens: List[Token], path: str) -> List[Block]:
    """Match every block keyword with its `end`; raise on imbalance. Inside brackets, `for`
    and `if` belong to comprehensions and `begin`/`end` inside [] are indices."""
    stack: List[Block] = []
    found: List[Block] = []
    brackets: List[str] = []
    for i, tok in enumerate(tokens):
        if tok.kind == "op" and tok.text in "([{":
            brackets.append(tok.text)
            continue
        if tok.kind == "op" and tok.text in ")]}":
            if not brackets or "([{"[")]}".index(tok.text)] != brackets[-1]:
                raise JuliaSyntaxError(path, tok.line, f"unbalanced {tok.text!r}")
            brackets.pop()
            continue
        if tok.kind != "keyword":
            continue
        previous = tokens[i - 1] if i else None
        if previous is not None and previous.text in (".", ":") and not tok.space_before and previous.kind == "op":
            continue  # x.end, :end (a symbol)
        word = tok.text
        if word in ("begin", "end") and "[" in brackets:
            continue
        if word in ("for", "if") and brackets:
            continue
        if word == "type" and previous is not None and previous.text in ("abstract", "primitive"):
            stack.append(Block(previous.text + " type", i))
        elif word in BLOCK_OPENERS:
            stack.append(Block(word, i))
        elif word == "end":
            if not stack:
                raise JuliaSyntaxError(path, tok.line, "`end` without an open block")
            block = stack.pop()
            block.end = i
            found.append(block)
    if brackets:
        raise JuliaSyntaxError(path, tokens[-1].line if tokens else 1, f"unclosed {brackets[-1]!r}")
    if stack:
        open_block = stack[-1]
        raise JuliaSyntaxError(path, tokens[open_block.start].line, f"`{open_block.keyword}` is never closed by `end`")
    return sorted(found, key=lambda b: b.start)


# ---------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------


def matching(tokens: List[Token], i: int) -> int:
    """Index of the bracket closing tokens[i]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    opener, depth = tokens[i].text, 0
    for j in range(i, len(tokens)):
        if tokens[j].kind == "op" and tokens[j].text == opener:
            depth += 1
        elif tokens[j].kind == "op" and tokens[j].text == pairs[opener]:
            depth -= 1
            if depth == 0:
                return j
    raise JuliaSyntaxError("?", tokens[i].line, f"unclosed {opener!r}")


def split_top(tokens: List[Token], separators: Tuple[str, ...] = (",",)) -> List[List[Token]]:
    """Split a token list at top-level separators; newlines are dropped; an empty trailing
    part (a trailing comma) is dropped."""
    parts: List[List[Token]] = [[]]
    depth = 0
    for tok in tokens:
        if tok.kind == "newline":
            continue
        if tok.kind == "op" and tok.text in "([{":
            depth += 1
        elif tok.kind == "op" and tok.text in ")]}":
            depth -= 1
        if depth == 0 and tok.kind == "op" and tok.text in separators:
            parts.append([])
            parts[-1].append(tok) if tok.text == ";" else None
            continue
        parts[-1].append(tok)
    if parts and not parts[-1]:
        parts.pop()
    return parts


def text_of(tokens: List[Token]) -> str:
    out = ""
    for tok in tokens:
        if tok.kind == "newline":
            continue
        out += (" " if out and tok.space_before else "") + tok.text
    return out


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


def parse_type(tokens: List[Token], path: str) -> TypeExpr:
    tokens = [t for t in tokens if t.kind != "newline"]
    expr, rest = parse_type_prefix(tokens, path)
    if rest:
        raise JuliaSyntaxError(path, rest[0].line, f"unexpected {text_of(rest)!r} after the type {expr}")
    return expr


def parse_type_prefix(tokens: List[Token], path: str) -> Tuple[TypeExpr, List[Token]]:
    if not tokens:
        raise JuliaSyntaxError(path, 0, "missing type")
    first = tokens[0]
    if first.kind == "number":
        return TypeExpr(first.text, number=int(first.text.replace("_", ""), 0)), tokens[1:]
    if first.kind != "ident":
        raise JuliaSyntaxError(path, first.line, f"expected a type, got {first.text!r}")
    name, i = first.text, 1
    while i + 1 < len(tokens) and tokens[i].text == "." and tokens[i + 1].kind == "ident":
        name += "." + tokens[i + 1].text
        i += 2
    args: List[TypeExpr] = []
    if i < len(tokens) and tokens[i].text == "{" and not tokens[i].space_before:
        close = matching(tokens, i)
        for part in split_top(tokens[i + 1 : close]):
            args.append(parse_type(part, path))
        i = close + 1
    return TypeExpr(name, args), tokens[i:]


@dataclass
class CallSite:
    """One foreign call: `@ccall` or `ccall`."""

    path: str
    line: int
    form: str  # "@ccall" or "ccall"
    function: str
    library: str  # the library expression as written, "" for none
    arg_values: List[str]
    arg_types: List[TypeExpr]
    return_type: TypeExpr
    start: int  # token span of the whole call, for "is this token part of a call site"
    stop: int
    varargs: bool = False


def parse_at_ccall(tokens: List[Token], i: int, path: str) -> CallSite:
    """tokens[i] is `@ccall`."""
    line = tokens[i].line
    j = i + 1
    while j + 2 < len(tokens) and tokens[j].kind == "ident" and tokens[j + 1].text == "=":
        j += 3  # options such as gc_safe=true
    # The call is the `name(...)` whose `)` is followed by `::`; whatever precedes `.name`
    # is the library expression, which may itself contain calls (`libepcomm().name`).
    k, close = j, -1
    while k < len(tokens) and tokens[k].kind != "newline":
        tok = tokens[k]
        if tok.kind == "op" and tok.text in "([{":
            end = matching(tokens, k)
            if (
                tok.text == "("
                and k > j
                and tokens[k - 1].kind == "ident"
                and end + 1 < len(tokens)
                and tokens[end + 1].text == "::"
            ):
                close = end
                break
            k = end + 1
            continue
        k += 1
    if close < 0:
        raise JuliaSyntaxError(path, line, "cannot parse the @ccall: expected `library.function(args...)::Return`")
    name = tokens[k - 1].text
    if k - 1 == j:
        library_tokens = []
    elif tokens[k - 2].text == "." and k - 2 > j:
        library_tokens = tokens[j : k - 2]
    else:
        library_tokens = tokens[j : k - 1]  # e.g. `$fptr(...)`: an indirect call
        name = ""
    values, types, varargs = [], [], False
    for part in split_top(tokens[k + 1 : close], (",", ";")):
        if part and part[0].text == ";":
            varargs = True
            part = part[1:]
        colons = [n for n, t in enumerate(part) if t.text == "::"]
        if not colons:
            raise JuliaSyntaxError(path, line, f"@ccall {name}: argument {text_of(part)!r} has no ::Type")
        cut = colons[-1]
        values.append(text_of(part[:cut]))
        types.append(parse_type(part[cut + 1 :], path))
    if close + 1 >= len(tokens) or tokens[close + 1].text != "::":
        raise JuliaSyntaxError(path, line, f"@ccall {name}: missing ::ReturnType")
    return_type, rest = parse_type_prefix(tokens[close + 2 :], path)
    stop = len(tokens) - len(rest)
    return CallSite(path, line, "@ccall", name, text_of(library_tokens), values, types, return_type, i, stop, varargs)


CALLING_CONVENTIONS = {"cdecl", "stdcall", "fastcall", "thiscall", "llvmcall"}


def parse_ccall(tokens: List[Token], i: int, path: str) -> CallSite:
    """tokens[i] is `ccall`, tokens[i + 1] is `(`."""
    line = tokens[i].line
    close = matching(tokens, i + 1)
    parts = split_top(tokens[i + 2 : close])
    if parts and len(parts) > 1 and text_of(parts[1]) in CALLING_CONVENTIONS:
        parts = parts[:1] + parts[2:]
    if len(parts) < 3:
        raise JuliaSyntaxError(path, line, "ccall needs (function, library), return type and argument types")
    target = parts[0]
    name, library = "", ""
    if target and target[0].text == "(":
        inner = split_top(target[1 : matching(target, 0)])
        name, library = text_of(inner[0]), text_of(inner[1]) if len(inner) > 1 else ""
    else:
        name = text_of(target)
    name = name.lstrip(":").strip('"')
    types_part = parts[2]
    if not types_part or types_part[0].text != "(" or matching(types_part, 0) != len(types_part) - 1:
        raise JuliaSyntaxError(path, line, f"ccall {name}: argument types must be a literal tuple")
    types = [parse_type(p, path) for p in split_top(types_part[1:-1])]
    values = [text_of(p) for p in parts[3:]]
    return CallSite(path, line, "ccall", name, library, values, types, parse_type(parts[1], path), i, close + 1)


def call_sites(tokens: List[Token], path: str) -> List[CallSite]:
    sites = []
    for i, tok in enumerate(tokens):
        if tok.kind == "macro" and tok.text == "@ccall":
            sites.append(parse_at_ccall(tokens, i, path))
        elif (
            tok.kind == "ident"
            and tok.text == "ccall"
            and i + 1 < len(tokens)
            and tokens[i + 1].text == "("
            and not tokens[i + 1].space_before
        ):
            sites.append(parse_ccall(tokens, i, path))
    return sites


# ---------------------------------------------------------------------------------------
# Definitions
# ---------------------------------------------------------------------------------------


@dataclass
class Const:
    name: str
    rhs: List[Token]
    line: int


@dataclass
class StructDef:
    name: str
    mutable: bool
    fields: List[Tuple[str, TypeExpr, int]]  # name, type, line
    line: int


@dataclass
class FunctionDef:
    name: str
    params: List[str]
    line: int
    start: int
    stop: int  # token span of the whole definition


def statement(tokens: List[Token], i: int) -> List[Token]:
    """Tokens from i to the end of the line (continuing inside brackets)."""
    out, depth = [], 0
    for tok in tokens[i:]:
        if tok.kind == "newline" and depth == 0:
            break
        if tok.kind == "op" and tok.text in "([{":
            depth += 1
        elif tok.kind == "op" and tok.text in ")]}":
            depth -= 1
        out.append(tok)
    return out


def definitions(tokens: List[Token], block_list: List[Block], path: str):
    consts: List[Const] = []
    structs: List[StructDef] = []
    functions: List[FunctionDef] = []
    ends = {b.start: b.end for b in block_list}
    for i, tok in enumerate(tokens):
        if tok.kind == "keyword" and tok.text == "const":
            line = statement(tokens, i + 1)
            if len(line) >= 3 and line[0].kind == "ident" and line[1].text == "=":
                consts.append(Const(line[0].text, line[2:], tok.line))
        elif tok.kind == "keyword" and tok.text == "struct" and i in ends:
            mutable = i > 0 and tokens[i - 1].text == "mutable"
            name_tok = tokens[i + 1]
            fields = []
            header_end = i + 2  # the body starts after `struct Name{T} <: Super`
            while header_end < ends[i] and tokens[header_end].kind != "newline":
                header_end += 1
            body = tokens[header_end : ends[i]]
            for part in split_lines(body):
                if part and part[0].kind == "string":
                    continue  # a field docstring
                colons = [n for n, t in enumerate(part) if t.text == "::"]
                if len(colons) != 1 or colons[0] != 1 or part[0].kind not in ("ident", "keyword"):
                    raise JuliaSyntaxError(
                        path, part[0].line, f"struct {name_tok.text}: cannot parse the field {text_of(part)!r}"
                    )
                fields.append((part[0].text, parse_type(part[2:], path), part[0].line))
            structs.append(StructDef(name_tok.text, mutable, fields, tok.line))
        elif tok.kind == "keyword" and tok.text == "function" and i in ends:
            name_tok = tokens[i + 1]
            params: List[str] = []
            if i + 2 < len(tokens) and tokens[i + 2].text == "(":
                params = positional(tokens[i + 3 : matching(tokens, i + 2)])
            functions.append(FunctionDef(name_tok.text, params, tok.line, i, ends[i]))
        elif (
            tok.kind == "ident"
            and (i == 0 or tokens[i - 1].kind == "newline")
            and i + 1 < len(tokens)
            and tokens[i + 1].text == "("
            and not tokens[i + 1].space_before
        ):
            close = matching(tokens, i + 1)
            if close + 1 < len(tokens) and tokens[close + 1].text == "=":
                params = positional(tokens[i + 2 : close])
                stop = i + len(statement(tokens, i))
                functions.append(FunctionDef(tok.text, params, tok.line, i, stop))
    return consts, structs, functions


def positional(tokens: List[Token]) -> List[str]:
    """The positional parameters (or arguments) of a parenthesized list; keywords follow `;`."""
    out = []
    for part in split_top(tokens, (",", ";")):
        if not part or part[0].text == ";":
            break
        out.append(text_of(part))
    return out


def split_lines(tokens: List[Token]) -> List[List[Token]]:
    lines: List[List[Token]] = [[]]
    for tok in tokens:
        if tok.kind == "newline" or (tok.kind == "op" and tok.text == ";"):
            lines.append([])
        else:
            lines[-1].append(tok)
    return [line for line in lines if line]
