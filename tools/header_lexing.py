# SPDX-License-Identifier: Apache-2.0
"""Lexing helpers for epcomm.h: blanking comments, collecting doc comments, joining
backslash-continued lines, and the token patterns of declarations and #if/#define
expressions."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Tuple

from header_model import HeaderError


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
