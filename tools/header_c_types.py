# SPDX-License-Identifier: Apache-2.0
"""The C types epcomm.h may spell, as ARCHITECTURE.md section 2 allows them.

INTEGER_CASTS (the fixed-width integer types, with their width and signedness) serves the
constant-expression evaluator's casts and the binding generators; BUILTIN_TYPES and
FORBIDDEN_TYPE_WORDS serve the parser's declarations.
"""

from __future__ import annotations

from typing import Dict, Tuple

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
