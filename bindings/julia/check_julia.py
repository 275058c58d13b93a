#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Static check of the Julia binding, bindings/julia/EpComm.jl (Python 3 and tree-sitter-julia).

No Julia runs on the project's machines, in CI or on the GPU machines, so instead of running
the package this script proves, from the source text, what a Julia run would otherwise find:

  syntax    every .jl file parses with tree-sitter-julia (no ERROR or MISSING node); every
            other check reads the forms it needs from that syntax tree (julia_forms.py);
  calls     every @ccall/ccall in src/ and ext/ names a function of epcomm.h, goes through the
            library handle `libepcomm()` that __init__ sets, and has the header's argument
            count, argument types and return type (C -> Julia table in c_julia_types.py);
  wrappers  every header function has a LibEpComm wrapper that passes its parameters in order;
  decls     every typedef, struct and constant of the header has its Julia counterpart: fields
            named and typed as in C, constants with the header's (and the snapshot's) values;
  layout    every LibEpComm struct has the ABI snapshot's size, alignment and field offsets,
            computed with Julia's layout rules for isbits structs;
  uses      every call of a LibEpComm wrapper in src/, ext/ and test/ passes the C parameter
            count, and every EPC_* / LibEpComm.X name it uses exists;
  coverage  every function of epcomm.h is called from the safe layer (src/ besides
            LibEpComm.jl, or ext/), except the few source_checks.UNWRAPPED names with reasons;
  api       every exported name is defined; the README's Julia examples parse and use only
            EpComm names that exist;
  package   Project.toml parses (tomllib, and the fallback parser used before Python 3.11) and
            has standard-library dependencies only, plus the CUDA weak dependency and its
            extension;
  init      __init__ exists, reads ENV["EPCOMM_LIB"] and sets the library path (in code).

The checks live in abi_checks.py (calls, wrappers, decls, layout), source_checks.py (uses,
init, api) and project_toml.py; julia_treesitter.py is the syntax gate (the tree-sitter-julia grammar
from PyPI); julia_forms.py reads the Julia forms involved from the accepted syntax tree
and c_julia_types.py holds the C -> Julia type table and Julia's struct layout rules.

Usage: check_julia.py [--package DIR] [--header FILE] [--abi-json FILE] [--fallback-toml]
Defaults come from the environment Meson's `bindings_env` sets (EPCOMM_INCLUDE,
EPCOMM_ABI_JSON) or from this repository. Exit status 0 when every check passes, 1 otherwise;
each failure is printed as `file:line: what is wrong`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tools"))

import epcomm_header  # noqa: E402
import julia_forms as jl  # noqa: E402
import julia_treesitter  # noqa: E402
from abi_checks import check_calls, check_declarations, check_layout, check_wrappers  # noqa: E402
from c_julia_types import CTypes, JuliaTypes  # noqa: E402
import project_toml  # noqa: E402
from project_toml import check_project  # noqa: E402
from source_checks import check_coverage, check_exports_and_readme, check_init, check_uses  # noqa: E402


class Report:
    def __init__(self, root: Path):
        self.root = root
        self.failures = 0

    def where(self, path, line: int) -> str:
        path = Path(path)
        try:
            path = path.resolve().relative_to(self.root)
        except ValueError:
            pass
        return f"{path}:{line}"

    def section(self, name: str, errors: List[str], summary: str) -> None:
        if errors:
            self.failures += len(errors)
            print(f"{name:<9} FAIL {len(errors)} problem(s)")
            for error in errors:
                print(f"    {error}")
        else:
            print(f"{name:<9} ok   {summary}")


class Package:
    """The parsed package: the syntax tree of every .jl file that parses."""

    def __init__(self, directory: Path, report: Report):
        self.directory = directory
        self.trees: Dict[Path, object] = {}
        self.syntax_errors: List[str] = []
        for sub in ("src", "ext", "test"):
            for path in sorted((directory / sub).rglob("*.jl")):
                root, errors = julia_treesitter.parse(path.read_text(encoding="utf-8"))
                self.syntax_errors += [f"{report.where(path, line)}: {message}" for line, message in errors]
                if not errors:
                    self.trees[path] = root
        self.lib_path = directory / "src" / "LibEpComm.jl"

    def under(self, *subs: str) -> List[Path]:
        return [p for p in self.trees if p.relative_to(self.directory).parts[0] in subs]


# ---------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------


def load_snapshot(path: Path, version: str) -> Tuple[Optional[dict], Optional[str]]:
    versions = json.loads(path.read_text(encoding="utf-8")).get("versions", {})
    if version not in versions:
        return None, f"{path}: the ABI snapshot has no version {version} (it has {sorted(versions)})"
    return versions[version], None


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", default=str(HERE / "EpComm.jl"))
    default_header = (
        Path(os.environ["EPCOMM_INCLUDE"]) / "epcomm" / "epcomm.h"
        if os.environ.get("EPCOMM_INCLUDE")
        else ROOT / "capi/include/epcomm/epcomm.h"
    )
    parser.add_argument("--header", default=str(default_header))
    parser.add_argument("--abi-json", default=os.environ.get("EPCOMM_ABI_JSON", str(ROOT / "capi/abi.json")))
    parser.add_argument(
        "--fallback-toml",
        action="store_true",
        help="read Project.toml with the fallback parser only (as on Python < 3.11)",
    )
    args = parser.parse_args(argv)
    if args.fallback_toml:
        project_toml.tomllib = None

    report = Report(ROOT)
    package_dir = Path(args.package).resolve()
    try:
        header = epcomm_header.parse_header(args.header)
    except (OSError, epcomm_header.HeaderError) as error:
        print(f"check_julia: FAIL cannot read the header: {error}")
        return 1
    version = header.abi_version_string()
    snapshot, problem = load_snapshot(Path(args.abi_json), version)
    print(
        f"check_julia: package {package_dir}\n"
        f"             header {args.header} (ABI {version}), snapshot {args.abi_json}\n"
        "             (static checks: no Julia runs here)"
    )
    if problem:
        print(f"snapshot  FAIL {problem}")
        return 1

    package = Package(package_dir, report)
    report.section(
        "syntax",
        package.syntax_errors,
        f"{len(package.trees)} .jl files parsed by tree-sitter-julia with no ERROR or MISSING node",
    )
    if package.lib_path not in package.trees:
        print(f"LibEpComm FAIL {package.lib_path} is missing or unreadable; run python3 tools/bindgen/generate.py")
        return 1

    lib_tree = package.trees[package.lib_path]
    try:
        consts, structs, functions = jl.definitions(lib_tree, str(package.lib_path))
    except jl.FormError as error:
        print(f"LibEpComm FAIL {report.where(package.lib_path, error.line)}: {error.message}")
        return 1
    aliases = {}
    for const in consts:
        if jl.is_dotted_name(const.rhs) or const.rhs.type == "parametrized_type_expression":
            try:
                aliases[const.name] = jl.type_expr(const.rhs, str(package.lib_path))
            except jl.FormError:
                pass
    julia = JuliaTypes(aliases, {s.name: s for s in structs})
    ctypes = CTypes(header)
    lib_names = {c.name for c in consts} | {s.name for s in structs} | {f.name for f in functions}

    sites: List[jl.CallSite] = []
    site_errors: List[str] = []
    for path in package.under("src", "ext"):
        try:
            sites += jl.call_sites(package.trees[path], str(path))
        except jl.FormError as error:
            site_errors.append(f"{report.where(path, error.line)}: {error.message}")
    errors, summary = check_calls(sites, header, ctypes, julia, report)
    report.section("calls", site_errors + errors, summary)
    report.section("wrappers", *check_wrappers(header, functions, sites, package.lib_path, report))
    report.section(
        "decls", *check_declarations(header, snapshot, consts, structs, julia, ctypes, package.lib_path, report)
    )
    report.section("layout", *check_layout(structs, julia, snapshot, version, package.lib_path, report))
    report.section("uses", *check_uses(package, header, lib_names, sites, report))
    report.section("coverage", *check_coverage(package, header, sites, report))
    report.section("package", *check_project(package_dir, report))
    report.section("init", *check_init(package, report))
    report.section("api", *check_exports_and_readme(package, report))
    print(
        f"check_julia: {'FAILED, ' + str(report.failures) + ' problem(s)' if report.failures else 'all checks passed'}"
    )
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
