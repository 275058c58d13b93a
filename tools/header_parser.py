# SPDX-License-Identifier: Apache-2.0
"""The parser of epcomm.h: the preprocessor subset (#if/#ifdef, #define, #include), then the
declarations (typedefs, structs, EPC_API functions), into a header_model.Header.
parse_header and parse_header_text are its entry points."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from header_c_types import BUILTIN_TYPES, FORBIDDEN_TYPE_WORDS
from header_expressions import ExpressionEvaluator
from header_lexing import Token, comments_by_end_line, logical_lines, strip_comments, tokenize_code
from header_model import (
    Constant,
    Field,
    Function,
    FunctionType,
    Header,
    HeaderError,
    Include,
    Macro,
    Param,
    Struct,
    Typedef,
)


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
