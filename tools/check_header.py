#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Test: the public header is self-contained C99 and C++17, and includes only
<stdint.h> and <stddef.h> (ARCHITECTURE.md section 2), so that any C toolchain, FFI
generator or binding can consume it without CUDA, NCCL or C++ headers.

Each language compiles a one-line translation unit that includes just the header, with
warnings as errors, so a header that only works after other includes, or trips pedantic
warnings in a user's strict build, fails here first.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from epcomm_header import DEFAULT_HEADER, HeaderError, parse_header  # noqa: E402

ALLOWED_INCLUDES = {"stdint.h", "stddef.h"}
STRICT = ["-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only"]


def compile_standalone(header: Path, compiler: Sequence[str], language: str, std: str) -> List[str]:
    suffix = ".c" if language == "c" else ".cpp"
    with tempfile.TemporaryDirectory(prefix="epcomm-header-") as tmp:
        unit = Path(tmp) / f"standalone{suffix}"
        unit.write_text(f'#include "{header.name}"\n')
        cmd = [*compiler, f"-std={std}", *STRICT, "-I", str(header.parent), str(unit)]
        built = subprocess.run(cmd, capture_output=True, text=True)
    print(f"check_header: {shlex.join(cmd)} -> exit {built.returncode}")
    if built.returncode != 0:
        return [f"{header} does not compile standalone as {std}:\n{built.stderr.rstrip()}"]
    return []


def check(header_path: str, cc: Sequence[str], cxx: Sequence[str]) -> List[str]:
    header = Path(header_path).resolve()
    failures: List[str] = []
    # Every #include counts, also those in branches only C++ or Windows would take.
    for include in parse_header(header).includes:
        if not include.system or include.name not in ALLOWED_INCLUDES:
            spelled = f"<{include.name}>" if include.system else f'"{include.name}"'
            failures.append(
                f"{header}:{include.line}: #include {spelled} is not allowed; the "
                "header may include only <stdint.h> and <stddef.h>"
            )
    failures += compile_standalone(header, cc, "c", "c99")
    failures += compile_standalone(header, cxx, "c++", "c++17")
    return failures


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="Check that epcomm.h is self-contained.")
    parser.add_argument("--header", default=str(DEFAULT_HEADER))
    parser.add_argument("--cc", default="cc", help="C compiler command, default: cc")
    parser.add_argument("--cxx", default="c++", help="C++ compiler command, default: c++")
    args = parser.parse_args(argv)
    try:
        failures = check(args.header, shlex.split(args.cc), shlex.split(args.cxx))
    except (HeaderError, OSError) as error:
        print(f"check_header: error: {error}", file=sys.stderr)
        return 1
    for failure in failures:
        print(f"FAIL: {failure}")
    if failures:
        print(f"check_header: {len(failures)} problem(s)")
        return 1
    print("check_header: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
