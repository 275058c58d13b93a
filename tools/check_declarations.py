#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Test: every EPC_API declaration of the public header documents each parameter on a line
of its own and ends with the contract fields (ARCHITECTURE.md section 2; the header's
conventions say how).

For each function the comment right above its declaration must have
- one parameter line per parameter, in the declaration's order: the parameter's name as the
  line's first word, then its direction (`in`, `out` or `in/out`), then (optionally) what it
  means, e.g. `  stream  in  where the barrier kernel runs`;
- no parameter line naming something that is not a parameter (a stale line after a rename);
- each of the contract fields `Kind:`, `Order:`, `Graphs:`, `Threads:`, `Since:` exactly once,
  each followed by text, and `Since:` naming an ABI version `<major>.<minor>` of this major
  that is not newer than the header's own.

  check_declarations.py [--header H]     check the header (exit 1 and one line per problem)
  check_declarations.py --self-test      check that each rule reports a header breaking it
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path
from typing import Callable, List, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from epcomm_header import DEFAULT_HEADER, Header, HeaderError, parse_header  # noqa: E402

CONTRACT_FIELDS = ("Kind", "Order", "Graphs", "Threads", "Since")
DIRECTIONS = ("in", "out", "in/out")
# A parameter line: indented, a C identifier, then a direction word.
PARAMETER_LINE = re.compile(r"^\s+([A-Za-z_]\w*)\s+(in/out|in|out)(?:\s|$)")


def parameter_lines(doc: str) -> List[Tuple[str, str]]:
    """(name, direction) of every parameter line of a doc comment, in order."""
    return [(m.group(1), m.group(2)) for m in map(PARAMETER_LINE.match, doc.split("\n")) if m]


def check_header(header: Header) -> List[str]:
    failures: List[str] = []
    major, minor, _ = header.abi_version()
    for function in sorted(header.functions.values(), key=lambda f: f.line):
        where = f"{header.path}:{function.line}: {function.name}"
        doc = function.doc
        if doc is None:
            failures.append(f"{where} has no comment right above its declaration")
            continue
        names = [p.name for p in function.params]
        if any(name is None for name in names):
            failures.append(f"{where}: every parameter needs a name to be documented")
            continue
        documented = parameter_lines(doc)
        documented_names = [name for name, _ in documented]
        for name in names:
            count = documented_names.count(name)
            if count == 0:
                failures.append(f"{where}: no parameter line for '{name}' (a line '  {name}  in|out|in/out  meaning')")
            elif count > 1:
                failures.append(f"{where}: {count} parameter lines for '{name}', expected one")
        for name in documented_names:
            if name not in names:
                failures.append(f"{where}: the parameter line '{name}' names no parameter of the declaration")
        in_both = [name for name in documented_names if name in names]
        if len(set(in_both)) == len(in_both) and in_both != [name for name in names if name in in_both]:
            failures.append(f"{where}: parameter lines are in the order {in_both}, the declaration's is {list(names)}")
        for field in CONTRACT_FIELDS:
            others = "|".join(CONTRACT_FIELDS)
            found = re.findall(rf"(?:^|(?<=\s)){field}:[ \t]*(.*?)(?=[ \t]+(?:{others}):|\n|$)", doc, flags=re.M)
            if not found:
                failures.append(f"{where}: the contract field '{field}:' is missing")
                continue
            if len(found) > 1:
                failures.append(f"{where}: the contract field '{field}:' appears {len(found)} times")
            value = found[0].strip()
            if not value:
                failures.append(f"{where}: the contract field '{field}:' says nothing")
                continue
            if field == "Since":
                since = re.match(r"(\d+)\.(\d+)\.?(?:\s|$)", value)
                if not since:
                    failures.append(f"{where}: 'Since: {value}' is not an ABI version <major>.<minor>")
                elif int(since.group(1)) != major or int(since.group(2)) > minor:
                    failures.append(
                        f"{where}: 'Since: {since.group(1)}.{since.group(2)}' is not a version of this "
                        f"header's ABI {major}.x up to {major}.{minor}"
                    )
    return failures


def check(header_path: str) -> List[str]:
    return check_header(parse_header(header_path))


# ---- self-test ------------------------------------------------------------------------


def _edit_doc(text: str, function: str, edit: Callable[[str], str]) -> str:
    """Apply `edit` to the raw comment right above `function`'s declaration only."""
    m = re.search(rf"/\*(?:(?!\*/).)*\*/\n(?=EPC_API [^;]*\b{function}\()", text, flags=re.S)
    if not m:
        raise AssertionError(f"self-test: no comment above {function} in the header; update the self-test")
    edited = edit(m.group(0))
    if edited == m.group(0):
        raise AssertionError(f"self-test: the edit of {function}'s comment changed nothing; update the self-test")
    return text[: m.start()] + edited + text[m.end() :]


def _line(pattern: str) -> Callable[[str], str]:
    """An edit: remove the comment's first line matching `pattern` (a regular expression)."""
    return lambda doc: re.sub(rf"^ \*{pattern}[^\n]*\n", "", doc, count=1, flags=re.M)


def _sub(pattern: str, replacement: str) -> Callable[[str], str]:
    return lambda doc: re.sub(pattern, replacement, doc, count=1, flags=re.M)


def self_test(header_path: str) -> int:
    """Each case breaks a copy of the real header in one way and expects a failure whose
    text contains every listed part; the unbroken header must pass."""
    text = Path(header_path).read_text()
    cases: List[Tuple[str, str, Callable[[str], str], List[str]]] = [
        ("a parameter line removed", "epc_dispatch", _line(r"\s+stream\s+in"), ["no parameter line for 'stream'"]),
        (
            "a parameter line renamed",
            "epc_dispatch",
            _sub(r"^( \*\s+)args(\s+in)", r"\1argz\2"),
            ["'argz' names no parameter", "no parameter line for 'args'"],
        ),
        (
            "a parameter line without its direction",
            "epc_group_barrier",
            _sub(r"^( \*\s+stream)\s+in\b", r"\1"),
            ["no parameter line for 'stream'"],
        ),
        (
            "a parameter documented twice",
            "epc_combine",
            _sub(r"^( \*\s+stream\s+in[^\n]*)$", r"\1\n\1"),
            ["2 parameter lines for 'stream'"],
        ),
        (
            "parameter lines out of order",
            "epc_complete",
            _sub(r"^( \*\s+flags\s+in[^\n]*)\n( \*\s+stream\s+in[^\n]*)$", r"\2\n\1"),
            ["order"],
        ),
        ("a contract field missing", "epc_group_barrier", _sub(r" Since: 2\.0\.", ""), ["'Since:' is missing"]),
        (
            "a contract field twice",
            "epc_get_version",
            _sub(r"Kind: local\.", "Kind: local. Kind: local."),
            ["'Kind:' appears 2 times"],
        ),
        (
            "a contract field without text",
            "epc_group_barrier",
            _sub(r"Graphs: not capturable\.", "Graphs:"),
            ["'Graphs:' says nothing"],
        ),
        ("Since naming a future minor", "epc_get_api", _sub(r"Since: 2\.0\.", "Since: 2.99."), ["Since: 2.99"]),
        (
            "no comment above a declaration",
            "epc_complete",
            lambda doc: doc + "typedef uint32_t EpcSelfTestGap;\n",
            ["epc_complete has no comment"],
        ),
    ]
    problems = 0
    good = check(header_path)
    if good:
        print("self-test: the unbroken header fails:\n  " + "\n  ".join(good))
        problems += 1
    with tempfile.TemporaryDirectory(prefix="epcomm-decl-selftest-") as tmp:
        for what, function, edit, expected in cases:
            broken = Path(tmp) / "epcomm.h"
            broken.write_text(_edit_doc(text, function, edit))
            failures = check(str(broken))
            joined = "\n".join(failures)
            missing = [part for part in [function, *expected] if part not in joined]
            if missing:
                print(f"self-test: {what}: not reported (expected {missing}); got:\n  " + "\n  ".join(failures))
                problems += 1
            else:
                print(f"self-test: {what}: reported ({failures[0]})")
    print(f"self-test: {len(cases)} broken headers: {'FAILED' if problems else 'OK'}")
    return 1 if problems else 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="Check the header's per-declaration documentation.")
    parser.add_argument("--header", default=str(DEFAULT_HEADER))
    parser.add_argument("--self-test", action="store_true", help="check that each rule catches a broken header")
    args = parser.parse_args(argv)
    try:
        if args.self_test:
            return self_test(args.header)
        failures = check(args.header)
    except (HeaderError, OSError) as error:
        print(f"check_declarations: error: {error}", file=sys.stderr)
        return 1
    for failure in failures:
        print(f"FAIL: {failure}")
    if failures:
        print(f"check_declarations: {len(failures)} problem(s)")
        return 1
    print(f"check_declarations: OK ({len(parse_header(args.header).functions)} declarations)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
