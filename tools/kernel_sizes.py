#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints each GPU kernel's machine-code size, registers and stack frame, from a build.

A low-latency step on few tokens spends most of its time fetching its kernels' code (a step's
kernels take turns on each SM; docs/measuring.md, "Kernel code size"), so a change to a kernel
should say what it did to the size of the code it runs. This compiles each kernel translation
unit of the build again with the build's own nvcc command line, to a cubin and with `ptxas -v`,
and reads each kernel's size from the cubin's symbol table (`readelf`); no GPU is needed.

Usage: kernel_sizes.py [--build DIR] [--filter REGEX] [--full-names] [--base REV] [SOURCE ...]
       kernel_sizes.py --build DIR --self-test   measure one small source and check the result
  SOURCE   kernel sources to compile, as the build names them (e.g. kernels/ll/ll_dispatch.cu);
           default: every .cu of the kernel library
  --filter print only kernels whose shortened name matches REGEX
  --base   also compile the sources as they are at git revision REV (same command lines, the
           tree's files from `git archive`, the build's generated headers), and print only what
           changed: `base -> now` for bytes, registers and stack, and how many kernels did not
Output: one line per kernel, `bytes registers stack name`, sorted by source and name.
"""

import argparse
import io
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
LIBRARY = "kernels/libepcomm_kernels.a"


def compile_commands(build):
    """(source, argv) of each nvcc command that builds a kernel object."""
    out = subprocess.run(
        ["ninja", "-C", build, "-t", "commands", LIBRARY], check=True, capture_output=True, text=True
    ).stdout
    commands = []
    for line in out.splitlines():
        argv = shlex.split(line)
        if not argv or os.path.basename(argv[0]) != "nvcc":
            continue
        sources = [a for a in argv if a.endswith(".cu")]
        if sources:
            commands.append((os.path.relpath(os.path.join(build, sources[-1]), ROOT), argv))
    return commands


def cubin_argv(argv, cubin):
    """The object's command line made to write `cubin` and print ptxas's resource usage."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-MD", "-c"):
            continue
        out.append(a)
    return out + ["-cubin", "-o", cubin, "-Xptxas", "-v"]


def enum_names(tree=ROOT):
    """{"(Enum)N": "Enum::kName"} of the enums that `tree`'s kernels/wire declares, which
    c++filt prints as casts in template arguments: enumerators numbered as C++ numbers them
    (an explicit value, else one more than the one before), so that a name survives a
    renumbering when each revision's kernels are named from its own headers."""
    names = {}
    wire = os.path.join(tree, "kernels", "wire")
    for header in sorted(os.listdir(wire)):
        with open(os.path.join(wire, header), encoding="utf-8") as f:
            text = re.sub(r"//[^\n]*", "", f.read())
        for enum, body in re.findall(r"enum class (\w+)[^{;]*\{([^}]*)\}", text):
            value = -1
            for item in filter(None, (part.strip() for part in body.split(","))):
                match = re.fullmatch(r"(\w+)(?:\s*=\s*(\d+))?", item)
                if not match:
                    break  # a value this script does not evaluate: name no more of this enum
                value = int(match.group(2)) if match.group(2) else value + 1
                names[f"({enum}){value}"] = f"{enum}::{match.group(1)}"
    return names


def short_name(demangled, enums):
    name = re.sub(r"\(anonymous namespace\)::|epc::kernels::", "", demangled)
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(\w+\)\d+", lambda m: enums.get(m.group(0), m.group(0)), name)
    return strip_parameters(name)


def strip_parameters(name):
    """The name without its trailing parameter list: the parenthesised group that closes at the
    end, matched from there, so that a cast left in a template argument, such as an enum value
    `(Kind)1` whose name was not found, stays in the name."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i]
    return name


def demangle(names):
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), check=True, capture_output=True, text=True).stdout
    return dict(zip(names, out.splitlines()))


def kernel_sizes(cubin):
    """{mangled kernel name: bytes} of the cubin's kernels (global FUNC symbols)."""
    out = subprocess.run(["readelf", "-sW", cubin], check=True, capture_output=True, text=True).stdout
    sizes = {}
    for line in out.splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis [<other>: n] Ndx Name: the name is the last field.
        if len(fields) >= 8 and fields[3] == "FUNC" and not fields[-1].startswith("$"):
            sizes[fields[-1]] = int(fields[2], 0)
    return sizes


def ptxas_usage(stderr):
    """{mangled entry name: (registers, stack bytes)} from ptxas -v's report."""
    usage, entry, stack = {}, None, 0
    for line in stderr.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            entry, stack = m.group(1), 0
            continue
        m = re.search(r"(\d+) bytes stack frame", line)
        if m and entry:
            stack = int(m.group(1))
        m = re.search(r"Used (\d+) registers", line)
        if m and entry:
            usage[entry] = (int(m.group(1)), stack)
            entry = None
    return usage


def checkout(rev, into):
    """The tracked files of the source tree at git revision `rev`, written under `into`; raises
    RuntimeError with git's message when there is no such revision."""
    run = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", rev], capture_output=True)
    if run.returncode != 0:
        raise RuntimeError(f"git archive {rev} failed: {run.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(run.stdout)) as tar:
        tar.extractall(into)


def rebase_argv(argv, build, base):
    """`argv` with each include directory and source inside the source tree, but not inside the
    build directory, moved to the same place under `base` (a checkout of another revision)."""
    build = os.path.realpath(build)

    def moved(path):
        p = os.path.realpath(os.path.join(build, path))
        inside = lambda d: p == d or p.startswith(d + os.sep)
        return os.path.join(base, os.path.relpath(p, ROOT)) if inside(ROOT) and not inside(build) else None

    out = []
    for a in argv:
        if a.startswith("-I") and len(a) > 2:
            out.append("-I" + (moved(a[2:]) or a[2:]))
        elif not a.startswith("-") and a.endswith(".cu"):
            out.append(moved(a) or a)
        else:
            out.append(a)
    return out


def measure(build, source, argv, tmp):
    """[(demangled name, bytes, registers, stack)] of the kernels of one source; raises
    RuntimeError with nvcc's message when it does not compile."""
    os.makedirs(tmp, exist_ok=True)
    cubin = os.path.join(tmp, os.path.basename(source) + ".cubin")
    run = subprocess.run(cubin_argv(argv, cubin), cwd=build, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"compiling {source} failed:\n{run.stderr}")
    sizes = kernel_sizes(cubin)
    usage = ptxas_usage(run.stderr)
    names = demangle(sorted(sizes))
    return [(names.get(m, m), size) + usage.get(m, (-1, -1)) for m, size in sizes.items()]


# The self-test's source and the kernels it defines.
SELF_TEST_SOURCE = "kernels/transport/gin_lifecycle.cu"
SELF_TEST_KERNELS = {"gin_reset_signals_kernel", "gin_flush_kernel"}


def self_test(build):
    """Measures SELF_TEST_SOURCE and checks that each of its kernels has a size, registers and a
    stack frame; 77 (skipped) when the build compiles no kernels."""
    commands = [(s, a) for s, a in compile_commands(build) if s == SELF_TEST_SOURCE]
    if not commands:
        print(f"kernel_sizes.py --self-test: skipped, {build} compiles no {SELF_TEST_SOURCE}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(build, *commands[0], tmp)
    found = {short_name(name, {}): (size, registers, stack) for name, size, registers, stack in rows}
    problems = [f"{k}: not found" for k in sorted(SELF_TEST_KERNELS - found.keys())]
    if len(found) != len(rows):  # two instances under one name would hide one of them
        problems.append(f"{len(rows)} kernels measured, {len(found)} names")
    cast = "f<(Kind)1, true>(P<(Kind)1, true>)"
    if strip_parameters(cast) != "f<(Kind)1, true>":
        problems.append(f"the parameters of {cast} stripped as {strip_parameters(cast)}")
    for kernel in sorted(SELF_TEST_KERNELS & found.keys()):
        size, registers, stack = found[kernel]
        if size <= 0 or registers <= 0 or stack < 0:
            problems.append(f"{kernel}: {size} bytes, {registers} registers, stack {stack}")
    problems += self_test_base(build, commands[0][1], rows)
    for problem in problems:
        print(f"kernel_sizes.py --self-test: {problem}", file=sys.stderr)
    if not problems:
        print(f"kernel_sizes.py --self-test: ok, {len(found)} kernels of {SELF_TEST_SOURCE} measured")
    return 1 if problems else 0


def self_test_base(build, argv, rows):
    """--base on a tree without changes: the source as HEAD has it, compiled from a checkout of
    HEAD, measures as `rows` do. Skipped (no problem) outside a git checkout or with changes."""
    status = subprocess.run(
        ["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    if status.returncode != 0 or status.stdout.strip():
        print("kernel_sizes.py --self-test: --base not checked (no git checkout, or it has changes)")
        return []
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base")
        checkout("HEAD", base)
        based = rebase_argv(argv, build, base)
        if not [a for a in based if a.endswith(".cu") and a.startswith(base)]:
            return ["--base: the source did not move into the checkout"]
        was = measure(build, SELF_TEST_SOURCE, based, os.path.join(tmp, "was"))
    if sorted(was) != sorted(rows):
        return [f"--base: HEAD measured {sorted(was)}, the tree {sorted(rows)}"]
    print(f"kernel_sizes.py --self-test: --base HEAD measured the same {len(rows)} kernels")
    return []


def filtered(measured, pattern, enums, full_names):
    """{name: (bytes, registers, stack)} of the measured kernels whose name matches."""
    rows = {}
    for name, size, registers, stack in measured:
        name = name if full_names else short_name(name, enums)
        if pattern.search(name):
            rows[name] = (size, registers, stack)
    return rows


def print_changes(source, rev, base, now):
    """The kernels of one source whose size, registers or stack differ between `base` and
    `now` ({name: (bytes, registers, stack)}; `-` where a kernel is new or gone), then how many
    did not."""
    print(f"# {source} against {rev}: bytes, registers, stack")
    same = 0
    for name in sorted(base.keys() | now.keys()):
        if base.get(name) == now.get(name):
            same += 1
            continue
        was, is_ = base.get(name, ("-",) * 3), now.get(name, ("-",) * 3)
        print(f"{was[0]:>8} -> {is_[0]:>8} {was[1]:>4} -> {is_[1]:>4} {was[2]:>4} -> {is_[2]:>4}  {name}")
    print(f"# {same} unchanged")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--filter", default="")
    parser.add_argument("--full-names", action="store_true")
    parser.add_argument("--base", default="")
    parser.add_argument("--self-test", action="store_true")
    parser.add_argument("sources", nargs="*")
    args = parser.parse_args()
    if args.self_test:
        return self_test(args.build)
    commands = compile_commands(args.build)
    if args.sources:
        wanted = {os.path.normpath(s) for s in args.sources}
        commands = [(s, a) for s, a in commands if os.path.normpath(s) in wanted]
        missing = wanted - {os.path.normpath(s) for s, _ in commands}
        if missing:
            print(
                f"kernel_sizes.py: not a kernel source of {args.build}: {', '.join(sorted(missing))}", file=sys.stderr
            )
            return 2
    pattern = re.compile(args.filter)
    enums = enum_names()
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = os.path.join(tmp, "base")
        try:
            if args.base:
                checkout(args.base, base_tree)
                base_enums = enum_names(base_tree)
            for source, argv in commands:
                now = filtered(
                    measure(args.build, source, argv, os.path.join(tmp, "now")), pattern, enums, args.full_names
                )
                if args.base:
                    based = rebase_argv(argv, args.build, base_tree)
                    base = filtered(
                        measure(args.build, source, based, os.path.join(tmp, "was")),
                        pattern,
                        base_enums,
                        args.full_names,
                    )
                    print_changes(source, args.base, base, now)
                elif now:
                    print(f"# {source}")
                    for name, (size, registers, stack) in sorted(now.items()):
                        print(f"{size:8d} {registers:4d} {stack:4d}  {name}")
        except RuntimeError as e:
            print(f"kernel_sizes.py: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
