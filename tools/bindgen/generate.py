#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes every binding's raw declarations from the one public header.

    python3 tools/bindgen/generate.py           # regenerate the committed files
    python3 tools/bindgen/generate.py --check   # exit 1 if a committed file is stale

Each backend is a module tools/bindgen/<language>.py with
    OUTPUTS: list of paths relative to the repository root
    render(header) -> dict mapping each of those paths to its full text
where `header` is tools/epcomm_header.py's model of capi/include/epcomm/epcomm.h.
Generated files are committed (so bindings build without Python); CI runs --check.
"""

import argparse
import difflib
import importlib
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tools" / "bindgen"))

import epcomm_header  # noqa: E402

BACKENDS = ["rust", "go", "julia", "python"]
# Every generated file starts with the project's licence line, in its language's comments.
SPDX = "SPDX-License-Identifier: Apache-2.0"
COMMENT = {".rs": "//", ".go": "//", ".jl": "#", ".py": "#"}


def with_licence(relative: str, text: str) -> str:
    prefix = COMMENT[pathlib.Path(relative).suffix]
    # A blank line keeps it out of a Go package's doc comment.
    gap = "\n" if relative.endswith(".go") else ""
    return f"{prefix} {SPDX}\n{gap}{text}"


HEADER = ROOT / "capi" / "include" / "epcomm" / "epcomm.h"


def render_all(header) -> dict:
    files = {}
    for name in BACKENDS:
        backend_path = ROOT / "tools" / "bindgen" / f"{name}.py"
        if not backend_path.exists():
            continue
        backend = importlib.import_module(name)
        rendered = backend.render(header)
        if sorted(rendered) != sorted(backend.OUTPUTS):
            raise SystemExit(f"backend {name} rendered {sorted(rendered)}, declared {backend.OUTPUTS}")
        files.update({relative: with_licence(relative, text) for relative, text in rendered.items()})
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--header", default=str(HEADER))
    args = parser.parse_args()

    header = epcomm_header.parse_header(args.header)
    files = render_all(header)
    stale = 0
    for relative, text in sorted(files.items()):
        path = ROOT / relative
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale += 1
            print(f"{relative} is stale: run python3 tools/bindgen/generate.py")
            diff = difflib.unified_diff(
                (current or "").splitlines(),
                text.splitlines(),
                f"{relative} (committed)",
                f"{relative} (generated)",
                lineterm="",
            )
            print("\n".join(list(diff)[:40]))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {relative}")
    if args.check:
        print(f"{len(files)} generated files checked, {stale} stale")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
