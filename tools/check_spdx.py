#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every source file carries the project's licence line in its first lines:

    SPDX-License-Identifier: Apache-2.0

Sources are the tracked C, C++, CUDA, Python, Rust, Go, Julia, shell and Meson files (shell
scripts also by their #! line). Generated files get the line from their generator
(tools/bindgen/generate.py). A line after a #! line is still among the first lines.

Usage: check_spdx.py [ROOT]          list the files without it and exit 1
       check_spdx.py --fix [ROOT]    add it where it is missing
"""

import os
import subprocess
import sys

LINE = "SPDX-License-Identifier: Apache-2.0"
COMMENT = {
    ".c": "/* {} */",
    ".h": "/* {} */",
    ".cpp": "// {}",
    ".hpp": "// {}",
    ".cu": "// {}",
    ".cuh": "// {}",
    ".rs": "// {}",
    ".go": "// {}",
    ".py": "# {}",
    ".jl": "# {}",
    ".sh": "# {}",
    ".build": "# {}",
    ".options": "# {}",
}
FIRST_LINES = 3


def style_of(root, path):
    ext = os.path.splitext(path)[1]
    if ext in COMMENT:
        return COMMENT[ext]
    if ext == "":
        with open(os.path.join(root, path), "rb") as f:
            if f.read(2) == b"#!":
                return "# {}"
    return None


def sources(root):
    out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
    for path in out.splitlines():
        style = style_of(root, path) if os.path.isfile(os.path.join(root, path)) else None
        if style:
            yield path, style


def has_line(text):
    return any(LINE in line for line in text.split("\n")[:FIRST_LINES])


def add_line(text, style):
    licence = style.format(LINE)
    if style == "// {}" and text.startswith("//"):
        # Apart from a comment that follows, which Go would read as the package's doc.
        return f"{licence}\n\n{text}"
    if text.startswith("#!"):
        first, _, rest = text.partition("\n")
        return f"{first}\n{licence}\n{rest}"
    return f"{licence}\n{text}"


def main():
    args = sys.argv[1:]
    fix = "--fix" in args
    args = [a for a in args if a != "--fix"]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    missing = []
    for path, style in sources(root):
        full = os.path.join(root, path)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        if has_line(text):
            continue
        if fix:
            with open(full, "w", encoding="utf-8") as f:
                f.write(add_line(text, style))
        missing.append(path)
    if fix:
        print(f"check_spdx: added the licence line to {len(missing)} file(s)")
        return 0
    for path in missing:
        print(f'{path}: no "{LINE}" in its first {FIRST_LINES} lines')
    print(
        f"check_spdx: {len(missing)} source file(s) without the licence line"
        if missing
        else "check_spdx: every source file carries the licence line"
    )
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
