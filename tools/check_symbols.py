#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Test: the shared library exports exactly the header's functions, properly versioned.

- Every defined dynamic symbol (nm -D --defined-only; the version-definition absolute
  symbols aside) is named epc_* and bound as the default version (@@) of a node
  EPCOMM_<major>.<n>, and that node is defined in capi/epcomm.map.
- The exported names are exactly the functions the header declares: nothing internal
  leaks (the version script and hidden visibility should prevent it), nothing declared
  is missing (a declaration without a definition would only fail when a caller links).
- readelf -d shows SONAME libepcomm.so.<EPC_ABI_MAJOR>.

Exit status 0 when all hold; otherwise one line per problem and status 1.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Sequence, Set

sys.path.insert(0, str(Path(__file__).resolve().parent))
from abi_dump import DumpError, read_dynamic_symbols  # noqa: E402
from epcomm_header import DEFAULT_HEADER, HeaderError, parse_header  # noqa: E402

DEFAULT_MAP = DEFAULT_HEADER.parents[2] / "epcomm.map"


def map_version_nodes(map_path: str) -> Set[str]:
    """Names of the version nodes a GNU version script defines (`NAME { ... } PARENT;`)."""
    text = Path(map_path).read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"(#|//)[^\n]*", " ", text)
    return set(re.findall(r"([A-Za-z_][\w.]*)\s*\{", text))


def read_soname(library: str, readelf: str) -> str:
    cmd = [readelf, "-d", library]
    shown = subprocess.run(cmd, capture_output=True, text=True)
    if shown.returncode != 0:
        raise DumpError(f"{' '.join(cmd)} failed: {shown.stderr.strip()}")
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", shown.stdout)
    return m.group(1) if m else ""


def check(library: str, header_path: str, map_path: str, nm: str, readelf: str) -> List[str]:
    header = parse_header(header_path)
    major = header.abi_version()[0]
    declared = set(header.functions)
    nodes_in_map = map_version_nodes(map_path)
    node_pattern = re.compile(rf"EPCOMM_{major}\.\d+")
    failures: List[str] = []

    soname = read_soname(library, readelf)
    expected_soname = f"libepcomm.so.{major}"
    if soname != expected_soname:
        failures.append(f"SONAME is {soname or '(none)'!r}, expected {expected_soname!r} (EPC_ABI_MAJOR is {major})")

    symbols = read_dynamic_symbols(library, nm)
    exported: Set[str] = set()
    for s in symbols.symbols:
        where = f"{s.name}" + (f"@{'@' if s.default else ''}{s.version}" if s.version else "")
        if not s.name.startswith("epc_"):
            failures.append(
                f"exported symbol {where} (type {s.type}) is not epc_*: the version script must keep it local"
            )
            continue
        exported.add(s.name)
        if s.version is None:
            failures.append(f"exported symbol {where} has no version node; link with -Wl,--version-script={map_path}")
        elif not s.default:
            failures.append(
                f"exported symbol {where} is a non-default (@) binding; epc_* symbols must be the default (@@) version"
            )
        elif not node_pattern.fullmatch(s.version):
            failures.append(f"exported symbol {where} is bound at node {s.version}, expected EPCOMM_{major}.<n>")
        elif s.version not in nodes_in_map:
            failures.append(
                f"exported symbol {where} is bound at node {s.version}, which "
                f"{map_path} does not define (it has: "
                f"{', '.join(sorted(nodes_in_map)) or 'none'})"
            )

    for name in sorted(declared - exported):
        failures.append(f"{name} is declared in {header_path} but not exported by {library}")
    for name in sorted(exported - declared):
        failures.append(f"{name} is exported by {library} but not declared in {header_path}")

    print(
        f"check_symbols: {library}: SONAME {soname!r}, {len(symbols.symbols)} exported "
        f"symbols, version definitions {symbols.version_definitions}, "
        f"{len(declared)} functions declared in the header, map nodes {sorted(nodes_in_map)}"
    )
    return failures


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="Check libepcomm's exported dynamic symbols.")
    parser.add_argument("--library", required=True)
    parser.add_argument("--header", default=str(DEFAULT_HEADER))
    parser.add_argument("--map", default=str(DEFAULT_MAP), help="the GNU version script")
    parser.add_argument("--nm", default="nm")
    parser.add_argument("--readelf", default="readelf")
    args = parser.parse_args(argv)
    try:
        failures = check(args.library, args.header, args.map, args.nm, args.readelf)
    except (HeaderError, DumpError, OSError) as error:
        print(f"check_symbols: error: {error}", file=sys.stderr)
        return 1
    for failure in failures:
        print(f"FAIL: {failure}")
    if failures:
        print(f"check_symbols: {len(failures)} problem(s)")
        return 1
    print("check_symbols: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
