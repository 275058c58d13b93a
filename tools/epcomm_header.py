#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A small parser for epcomm.h, the library's public C ABI header (Python 3 standard library).

It understands exactly the C subset that ARCHITECTURE.md section 2 allows in the header:
object-like #define constants (integer expressions), initializer macros (a braced list, a
function-like template `NAME(T) {...}`, or an object-like use of such a template), #include,
#if/#ifdef conditionals, scalar and function-pointer typedefs, opaque struct typedefs,
`typedef struct X {...} X;` with fixed-width fields, fixed arrays and function-pointer
fields, and `EPC_API` function declarations, each with the comment right above it
(`Function.doc`). Anything else raises HeaderError naming the file and line, so that a
header change this parser does not model is noticed instead of silently missing from the
ABI snapshot or from generated bindings.

Conditionals are evaluated the way a C (not C++) compiler on a non-Windows platform sees
them; pass `predefined` to model another view.

Usage as a script: `epcomm_header.py [HEADER]` prints the parsed model as JSON.

This module is the public entry point; the parts live beside it in tools/:
  header_c_types.py      the C types the header may spell (INTEGER_CASTS, BUILTIN_TYPES, ...)
  header_model.py        Header and its declarations (Struct, Field, Function, ...), HeaderError
  header_lexing.py       comments, logical lines and tokens
  header_expressions.py  the integer constant-expression evaluator
  header_parser.py       the parser: parse_header, parse_header_text
It re-exports what the tools and bindings generators use; the declarations themselves are
reached through the Header that parse_header returns.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from header_c_types import INTEGER_CASTS
from header_lexing import strip_comments
from header_model import Header, HeaderError
from header_parser import parse_header, parse_header_text

__all__ = [
    "DEFAULT_HEADER",
    "Header",
    "HeaderError",
    "INTEGER_CASTS",
    "main",
    "parse_header",
    "parse_header_text",
    "strip_comments",
]

DEFAULT_HEADER = Path(__file__).resolve().parent.parent / "capi/include/epcomm/epcomm.h"


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
