# SPDX-License-Identifier: Apache-2.0
"""The integer constant-expression evaluator, for #define values, #if conditions and array
lengths in epcomm.h."""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

from header_c_types import INTEGER_CASTS
from header_lexing import EXPR_TOKEN
from header_model import HeaderError


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
