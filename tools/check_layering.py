#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when a source file includes across a boundary the design forbids.

The layers (docs/design.md states them the same way):

  capi/     the C ABI. Reaches core/ only; never kernels/.
  core/     group, planner, handles. Reaches kernels/ only through kernels/launch.hpp and
            kernels/wire/ (never a .cuh); never capi/.
  kernels/  device code. Never reaches core/ or capi/. Inside it, wire/ (what host and device
            share byte for byte) includes nothing else of kernels/, and launch.hpp only wire/.
  The library (capi/, core/, kernels/) never includes tests/ (the reference model, the GPU
  launcher) or bench/.
  Inside core/, no two modules (a .hpp with its .cpp) depend on each other, directly or
  through others.

Usage: check_layering.py [ROOT]        check the tree at ROOT (default: this repository)
       check_layering.py --self-test   check that each rule catches a file that breaks it
"""

import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cu", ".cuh", ".c")
LIBRARY = ("capi/", "core/", "kernels/")


def violation(path, target):
    """Why `path` may not include `target` (both relative to the root), or None."""
    if path.startswith(LIBRARY) and target.startswith(("tests/", "bench/")):
        return "the library never includes tests/ or bench/"
    if path.startswith("capi/") and target.startswith("kernels/"):
        return "capi/ reaches kernels/ only through core/"
    if path.startswith("core/"):
        if target.startswith("capi/"):
            return "core/ never includes the C layer"
        if target.startswith("kernels/") and target != "kernels/launch.hpp" and not target.startswith("kernels/wire/"):
            return "core/ reaches kernels/ only through kernels/launch.hpp and kernels/wire/"
        if target.endswith(".cuh"):
            return "core/ never includes device code"
    if path.startswith("kernels/"):
        if target.startswith(("core/", "capi/")):
            return "kernels/ never includes core/ or capi/"
        if (
            path.startswith("kernels/wire/")
            and target.startswith("kernels/")
            and not target.startswith("kernels/wire/")
        ):
            return "kernels/wire/ includes nothing else of kernels/"
        if path == "kernels/launch.hpp" and target.startswith("kernels/") and not target.startswith("kernels/wire/"):
            return "kernels/launch.hpp includes only kernels/wire/"
    return None


def module_of(path):
    return os.path.splitext(path)[0]


def core_cycles(edges):
    """Module dependency cycles among core/ modules, each as a list of modules."""
    cycles, state = [], {}

    def visit(module, stack):
        state[module] = "open"
        stack.append(module)
        for nxt in sorted(edges.get(module, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    return cycles


def check(root):
    problems = []
    edges = {}
    for top in LIBRARY:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                full = os.path.join(dirpath, name)
                path = os.path.relpath(full, root).replace(os.sep, "/")
                with open(full, encoding="utf-8") as f:
                    text = f.read()
                for match in INCLUDE.finditer(text):
                    target = match.group(1)
                    if path.startswith("core/") and target.startswith("core/") and module_of(target) != module_of(path):
                        edges.setdefault(module_of(path), set()).add(module_of(target))
                    why = violation(path, target)
                    if why:
                        line = text.count("\n", 0, match.start()) + 1
                        problems.append(f'{path}:{line}: includes "{target}": {why}')
    for cycle in core_cycles(edges):
        problems.append(f"{cycle[0]}: modules depend on each other: {' -> '.join(cycle)}")
    return problems


def self_test():
    cases = {
        "capi/x.cpp": "kernels/wire/ll_params.hpp",
        "core/x.cpp": "kernels/ll/ll_dispatch_send.cuh",
        "core/y.cpp": "kernels/transport/peer_transport.cuh",
        "core/z.cpp": "capi/handles.hpp",
        "core/w.cpp": "tests/reference/reference.hpp",
        "kernels/ll/x.cuh": "core/group.hpp",
        "kernels/wire/x.hpp": "kernels/device/warp.cuh",
        "kernels/launch.hpp": "kernels/common/kernel_stack.hpp",
        "core/a.cpp": "core/b.hpp",  # and core/b.cpp includes core/a.hpp: a cycle
    }
    allowed = {
        "core/ok.cpp": "kernels/launch.hpp",
        "core/ok2.hpp": "kernels/wire/ht_params.hpp",
        "kernels/ht/ok.cuh": "kernels/transport/peer_transport.cuh",
        "capi/ok.cpp": "core/group.hpp",
    }
    failures = 0
    with tempfile.TemporaryDirectory() as root:
        for path, target in {**cases, **allowed}.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(f'#include <cstdint>\n#include "{target}"\n')
        with open(os.path.join(root, "core/b.cpp"), "w") as f:
            f.write('#include "core/a.hpp"\n')
        found = {p.split(":")[0] for p in check(root)}
    for path in cases:
        if path not in found and module_of(path) not in found:
            print(f'self-test: {path} including "{cases[path]}" was not reported')
            failures += 1
    for path in allowed:
        if path in found:
            print(f'self-test: {path} including "{allowed[path]}" was reported but is allowed')
            failures += 1
    print(
        f"self-test: {len(cases)} forbidden includes, {len(allowed)} allowed ones: "
        f"{'ok' if failures == 0 else f'{failures} wrong'}"
    )
    return 1 if failures else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check(root)
    for p in problems:
        print(p)
    print(
        f"layering: {len(problems)} forbidden include(s)" if problems else "layering: every include respects the layers"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
