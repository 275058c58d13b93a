#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compiles the README's complete C examples against the public header, so the
documentation cannot drift from the API. A ```c block counts as complete when it has an
#include line; snippets without one are fragments and are skipped."""

import argparse
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile


def c_blocks(readme: str):
    return re.findall(r"```c\n(.*?)```", readme, flags=re.S)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--readme", required=True)
    parser.add_argument("--include", required=True, help="directory holding epcomm/epcomm.h")
    parser.add_argument("--cc", default="cc")
    args = parser.parse_args()

    blocks = [b for b in c_blocks(pathlib.Path(args.readme).read_text()) if "#include" in b]
    if not blocks:
        print(f"no complete C example (a ```c block with #include) in {args.readme}")
        return 1
    failed = 0
    for number, block in enumerate(blocks, 1):
        with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as source:
            source.write(block)
        cmd = shlex.split(args.cc) + [
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
            "-fsyntax-only",
            "-I",
            args.include,
            source.name,
        ]
        result = subprocess.run(cmd, capture_output=True, text=True)
        status = "ok" if result.returncode == 0 else "FAILED"
        print(f"README C example {number}: {status}")
        if result.returncode != 0:
            failed += 1
            print(result.stderr)
        pathlib.Path(source.name).unlink()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
