#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Print the ABI version of capi/include/epcomm/epcomm.h as major.minor.patch.

Meson's project() reads it (so the Python wheel's version is the header's); the header is
the only place the version is written.
"""

import pathlib
import re
import sys

HEADER = pathlib.Path(__file__).resolve().parents[1] / "capi" / "include" / "epcomm" / "epcomm.h"


def header_version(path: pathlib.Path = HEADER) -> str:
    text = path.read_text()
    parts = []
    for name in ("MAJOR", "MINOR", "PATCH"):
        match = re.search(rf"^#define EPC_ABI_{name} (\d+)\s*$", text, re.MULTILINE)
        if match is None:
            raise SystemExit(f"{path}: no '#define EPC_ABI_{name} <number>'")
        parts.append(match.group(1))
    return ".".join(parts)


if __name__ == "__main__":
    print(header_version(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HEADER))
