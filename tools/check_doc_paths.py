#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when a page names a file or folder of this repository that does not exist.

Checked: README.md, CHANGELOG.md, docs/*.md and the bindings' READMEs; every markdown link
to a relative path, and every `backticked` path that starts with one of the repository's
top-level folders. Not checked: the "before" column of docs/design.md's map of moved files
(old paths by design), paths with wildcards or placeholders ({}, *, <>), and URLs.

Usage: check_doc_paths.py [ROOT]
"""

import glob
import os
import re
import sys

TOP = ("capi/", "core/", "kernels/", "bindings/", "tests/", "bench/", "tools/", "docs/", "examples/", ".ci/")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
CODE = re.compile(r"`([^`\s]+)`")
MAP_HEADING = "## Where the files went"


def pages(root):
    names = ["README.md", "CHANGELOG.md"] + sorted(glob.glob("docs/*.md", root_dir=root))
    names += sorted(glob.glob("bindings/*/README.md", root_dir=root))
    names += sorted(glob.glob("bindings/julia/*/README.md", root_dir=root))
    return [n for n in names if os.path.isfile(os.path.join(root, n))]


def candidates(line):
    for match in LINK.finditer(line):
        target = match.group(1)
        if "://" not in target and not target.startswith("mailto:"):
            yield target, True
    for match in CODE.finditer(line):
        token = match.group(1).rstrip(".,:;")
        if token.startswith(TOP):
            yield token, False


def check(root):
    problems = []
    for page in pages(root):
        base = os.path.dirname(page)
        in_map = False
        with open(os.path.join(root, page), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.startswith("## "):
                    in_map = page == "docs/design.md" and line.startswith(MAP_HEADING)
                if in_map and line.startswith("|"):
                    line = "|".join(line.split("|")[2:])  # the "now" column only
                for target, relative in candidates(line):
                    if any(c in target for c in "{}*<>$"):
                        continue
                    target = target.split(":")[0]  # a file:line reference
                    # A link is relative to its page; a backticked path to the root, or to
                    # the page's folder (a binding's README naming its own files).
                    tries = [os.path.join(base, target)] if relative else [target, os.path.join(base, target)]
                    if not any(os.path.exists(os.path.join(root, os.path.normpath(t))) for t in tries):
                        problems.append(f'{page}:{number}: "{target}" does not exist')
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check(root)
    for p in problems:
        print(p)
    print(
        f"check_doc_paths: {len(problems)} missing path(s)"
        if problems
        else "check_doc_paths: every path the pages name exists"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
