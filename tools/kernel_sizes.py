#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints each GPU kernel's machine-code size, registers and stack frame, from a build.

A low-latency step on few tokens spends most of its time fetching its kernels' code (a step's
kernels take turns on each SM; docs/measuring.md, "Kernel code size"), so a change to a kernel
should say what it did to the size of the code it runs. This compiles each kernel translation
unit of the build again with the build's own nvcc command line, to a cubin and with `ptxas -v`,
and reads each kernel's size from the cubin's symbol table (`readelf`); no GPU is needed.

Usage: kernel_sizes.py [--build DIR] [--filter REGEX] [--full-names] [SOURCE ...]
       kernel_sizes.py --build DIR --self-test   measure one small source and check the result
  SOURCE   kernel sources to compile, as the build names them (e.g. kernels/ll/ll_dispatch.cu);
           default: every .cu of the kernel library
  --filter print only kernels whose shortened name matches REGEX
Output: one line per kernel, `bytes registers stack name`, sorted by source and name.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


def enum_names():
    """{"(Enum)N": "Enum::kName"} of the enums that kernels/wire declares with explicit values,
    which c++filt prints as casts in template arguments."""
    names = {}
    wire = os.path.join(ROOT, "kernels", "wire")
    for header in sorted(os.listdir(wire)):
        with open(os.path.join(wire, header), encoding="utf-8") as f:
            text = f.read()
        for enum, body in re.findall(r"enum class (\w+)[^{;]*\{([^}]*)\}", text):
            for name, value in re.findall(r"(\w+)\s*=\s*(\d+)", body):
                names[f"({enum}){value}"] = f"{enum}::{name}"
    return names


def short_name(demangled, enums):
    name = re.sub(r"\(anonymous namespace\)::|epc::kernels::", "", demangled)
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(\w+\)\d+", lambda m: enums.get(m.group(0), m.group(0)), name)
    return re.sub(r"\(.*\)$", "", name)


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


def measure(build, source, argv, tmp):
    """[(demangled name, bytes, registers, stack)] of the kernels of one source; raises
    RuntimeError with nvcc's message when it does not compile."""
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
    for kernel in sorted(SELF_TEST_KERNELS & found.keys()):
        size, registers, stack = found[kernel]
        if size <= 0 or registers <= 0 or stack < 0:
            problems.append(f"{kernel}: {size} bytes, {registers} registers, stack {stack}")
    for problem in problems:
        print(f"kernel_sizes.py --self-test: {problem}", file=sys.stderr)
    if not problems:
        print(f"kernel_sizes.py --self-test: ok, {len(found)} kernels of {SELF_TEST_SOURCE} measured")
    return 1 if problems else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--filter", default="")
    parser.add_argument("--full-names", action="store_true")
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
        for source, argv in commands:
            try:
                measured = measure(args.build, source, argv, tmp)
            except RuntimeError as e:
                print(f"kernel_sizes.py: {e}", file=sys.stderr)
                return 1
            rows = []
            for name, size, registers, stack in measured:
                name = name if args.full_names else short_name(name, enums)
                if pattern.search(name):
                    rows.append((name, size, registers, stack))
            if rows:
                print(f"# {source}")
                for name, size, registers, stack in sorted(rows):
                    print(f"{size:8d} {registers:4d} {stack:4d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
