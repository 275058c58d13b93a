#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Print the LD_PRELOAD list (colon-separated absolute paths) that lets a program which was
not built with AddressSanitizer load a libepcomm.so that was.

An ASan-instrumented shared library needs the ASan runtime to be the first library of the
process (else ASan stops with "ASan runtime does not come first in initial library list").
The bindings' test programs (Python, the Rust and Go test binaries) are not instrumented, so
the runtime has to be preloaded into them. libstdc++ is preloaded too: ASan resolves its
__cxa_throw interceptor when it starts, and in a process that loads libstdc++ only later
(Python, Rust, Go) the first C++ exception inside libepcomm (every refused argument throws
one internally) would otherwise stop the process with "CHECK failed: ... real___cxa_throw".

Usage: sanitizer_preload.py --cc "CC [ARGS]" --cxx "CXX [ARGS]" (shell words)
Only GCC's runtime (libasan.so) is supported: the ASan build of epcomm uses GCC.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys


def library_path(compiler: list[str], name: str) -> str:
    printed = subprocess.run(
        compiler + [f"-print-file-name={name}"], check=True, capture_output=True, text=True
    ).stdout.strip()
    # GCC prints the bare name back when it does not know the file.
    if not os.path.isabs(printed) or not os.path.exists(printed):
        raise SystemExit(
            f"sanitizer_preload: {' '.join(compiler)} does not know {name} "
            f"(it printed {printed!r}); install GCC's libasan / libstdc++"
        )
    return os.path.realpath(printed)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cc", required=True, help="the C compiler command (shell words)")
    parser.add_argument("--cxx", required=True, help="the C++ compiler command (shell words)")
    args = parser.parse_args(argv)
    paths = [library_path(shlex.split(args.cc), "libasan.so"), library_path(shlex.split(args.cxx), "libstdc++.so")]
    print(":".join(paths), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
