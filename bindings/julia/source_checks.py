# SPDX-License-Identifier: Apache-2.0
"""The source checks of check_julia.py: how the safe layer, the extension, the tests and the
README use LibEpComm, and what __init__ and the exports promise.

Each check returns (errors, summary), like abi_checks.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Tuple

import julia_forms as jl
import julia_treesitter
from abi_checks import c_signature

# Safe-layer structs copied from or into a C struct field by field, by name
# (`getfield(raw, name) for name in fieldnames(...)`): their fields must exist in C.
MIRRORS = {
    "GroupConfig": "EpcGroupConfig",
    "Plan": "EpcPlan",
    "GroupInfo": "EpcGroupInfo",
    "HandleInfo": "EpcHandleInfo",
}
# C fields a mirror deliberately leaves out, with the reason. Every other field of a mirrored
# C struct, besides struct_size, abi_version and reserved* fields, must be mirrored, so a
# field the header gains fails the check until the safe layer carries it.
NOT_MIRRORED = {
    ("EpcPlan", "num_regions"): "the length of Plan.regions",
}
# Functions that build a C struct from keyword arguments named like its fields.
STRUCT_BUILDERS = {"c_struct", "extensible"}
# Header functions the safe layer deliberately never calls, with the reason. Every other
# function of epcomm.h must be called from src/ (besides LibEpComm.jl) or ext/.
UNWRAPPED = {
    "epc_get_api": "the dlopen function table: Julia resolves each symbol itself through Libdl",
}


def epc_calls(tree, outside=()) -> List[jl.Call]:
    """Calls of `epc_*` functions (bare or `Mod.epc_*`) outside the byte spans `outside`."""
    return [
        call
        for call in jl.calls(tree)
        if call.name.startswith("epc_") and not any(a <= call.start < b for a, b in outside)
    ]


def check_uses(package, header, lib_names: set, sites, report) -> Tuple[List[str], str]:
    errors, calls, names = [], 0, 0
    spans = {}
    for site in sites:
        spans.setdefault(site.path, []).append((site.start, site.stop))
    for path in package.under("src", "ext", "test"):
        if path == package.lib_path:
            continue
        tree = package.trees[path]
        for node in jl.walk(tree):
            if node.type == "identifier" and re.fullmatch(r"EPC_[A-Z0-9_]+", jl.text(node)):
                names += 1
                if jl.text(node) not in header.constants:
                    errors.append(
                        f"{report.where(path, jl.line_of(node))}: {jl.text(node)} is not a constant of epcomm.h"
                    )
            elif node.type == "field_expression":
                parts = jl.code_children(node)
                if len(parts) == 2 and jl.dotted_last(parts[0]) == "LibEpComm" and parts[1].type == "identifier":
                    if jl.text(parts[1]) not in lib_names:
                        errors.append(
                            f"{report.where(path, jl.line_of(parts[1]))}: LibEpComm.{jl.text(parts[1])} does not exist"
                        )
        for call in epc_calls(tree, spans.get(str(path), [])):
            at = report.where(path, call.line)
            function = header.functions.get(call.name)
            if function is None:
                errors.append(f"{at}: {call.name} is not a function of epcomm.h")
                continue
            count = sum(1 for _node, keyword in call.arguments if not keyword)
            calls += 1
            if count != len(function.params):
                errors.append(
                    f"{at}: {call.name} is called with {count} arguments; "
                    f"C declares {len(function.params)} ({c_signature(function)})"
                )
    mirror_errors, mirrors, built = check_field_names(package, header, report)
    errors += mirror_errors
    return errors, (
        f"{calls} wrapper calls in src/, ext/, test/ pass the C parameter count; "
        f"{names} EPC_* uses name header constants; {mirrors} mirrored structs name C fields "
        f"and carry every one but headers, reserved and {len(NOT_MIRRORED)} listed; "
        f"{built} struct builds name C fields"
    )


def check_field_names(package, header, report) -> Tuple[List[str], int, int]:
    """Fields addressed by name must exist in the C struct: mirrored structs, and keywords of
    c_struct(EpcX; field = ...) / extensible(EpcX; ...). A mirrored struct also carries every
    field of its C struct but the header, reserved fields and NOT_MIRRORED."""
    errors, mirrors, built = [], 0, 0
    for path in package.under("src", "ext"):
        if path == package.lib_path:
            continue
        tree = package.trees[path]
        try:
            _consts, structs, _functions = jl.definitions(tree, str(path))
        except jl.FormError as error:
            errors.append(f"{report.where(path, error.line)}: {error.message}")
            continue
        for definition in structs:
            c_name = MIRRORS.get(definition.name)
            if c_name is None:
                continue
            mirrors += 1
            c_fields = {f.name for f in header.structs[c_name].fields}
            for name, _type, line in definition.fields:
                if name not in c_fields:
                    errors.append(
                        f"{report.where(path, line)}: {definition.name}.{name} is copied by "
                        f"name from {c_name}, which has no field {name}"
                    )
            mirrored = {name for name, _type, _line in definition.fields}
            for field in header.structs[c_name].fields:
                if (
                    field.name in mirrored
                    or field.name in ("struct_size", "abi_version")
                    or field.name.startswith("reserved")
                    or (c_name, field.name) in NOT_MIRRORED
                ):
                    continue
                errors.append(
                    f"{report.where(path, definition.line)}: {c_name}.{field.name} has no "
                    f"field in {definition.name}: add it (the safe layer would leave it 0), "
                    "or list it in source_checks.NOT_MIRRORED with the reason"
                )
        for call in jl.calls(tree):
            if call.name not in STRUCT_BUILDERS or not call.arguments or call.arguments[0][1]:
                continue
            c_name = jl.text(call.arguments[0][0])
            if c_name not in header.structs:
                continue
            c_fields = {f.name for f in header.structs[c_name].fields}
            built += 1
            for argument, keyword in call.arguments[1:]:
                # `name = value` anywhere is a keyword argument; after the `;`, so is a bare
                # `name`; a splat (`pairs...`) is not checkable here.
                if argument.type == "named_argument":
                    name_node = jl.code_children(argument)[0]
                elif keyword and argument.type == "identifier":
                    name_node = argument
                else:
                    continue
                name = jl.text(name_node)
                if name not in c_fields:
                    errors.append(
                        f"{report.where(path, jl.line_of(name_node))}: {call.name}({c_name}; {name} = ...): "
                        f"{c_name} has no field {name}"
                    )
    for (c_name, name), _reason in NOT_MIRRORED.items():
        if c_name not in header.structs or name not in {f.name for f in header.structs[c_name].fields}:
            errors.append(f"source_checks.NOT_MIRRORED lists {c_name}.{name}, which epcomm.h does not declare")
    return errors, mirrors, built


def check_coverage(package, header, sites, report) -> Tuple[List[str], str]:
    """Every function of epcomm.h is reached from the safe layer: a LibEpComm wrapper called
    in src/ (besides LibEpComm.jl) or ext/, or a direct @ccall there. A function the header
    gains therefore fails this check until it is wrapped (or listed in UNWRAPPED with the
    reason); an UNWRAPPED entry that is called, or that the header lacks, fails too."""
    called = {}
    for site in sites:
        if Path(site.path) != package.lib_path:
            called.setdefault(site.function, f"{report.where(site.path, site.line)} (@ccall)")
    for path in package.under("src", "ext"):
        if path == package.lib_path:
            continue
        for call in epc_calls(package.trees[path]):
            called.setdefault(call.name, report.where(path, call.line))
    errors = []
    for name, function in header.functions.items():
        if name in UNWRAPPED:
            if name in called:
                errors.append(
                    f"{called[name]}: {name} is called, but source_checks.UNWRAPPED says "
                    f"the safe layer leaves it alone ({UNWRAPPED[name]}); drop it there"
                )
        elif name not in called:
            errors.append(
                f"{report.where(package.lib_path, 1)}: epcomm.h declares {name} "
                f"({c_signature(function)}), but nothing in src/ or ext/ besides LibEpComm.jl "
                "calls it: wrap it in the safe layer, or list it in source_checks.UNWRAPPED "
                "with the reason"
            )
    for name in UNWRAPPED:
        if name not in header.functions:
            errors.append(
                f"{report.where(package.lib_path, 1)}: source_checks.UNWRAPPED lists {name}, "
                "which epcomm.h does not declare"
            )
    wrapped = len(header.functions) - len(UNWRAPPED)
    return errors, (
        f"{wrapped}/{len(header.functions)} header functions called from the safe layer; "
        f"left to LibEpComm on purpose: {', '.join(sorted(UNWRAPPED)) or 'none'}"
    )


def reads_epcomm_lib(tree) -> bool:
    """`ENV["EPCOMM_LIB"]`, or `ENV, "EPCOMM_LIB"` as consecutive arguments of a call
    (`get(ENV, "EPCOMM_LIB", default)`, `haskey(ENV, "EPCOMM_LIB")`)."""
    for node in jl.walk(tree):
        if node.type == "index_expression":
            parts = jl.code_children(node)
            index = jl.code_children(parts[-1]) if len(parts) == 2 else []
            if jl.text(parts[0]) == "ENV" and index and jl.text(index[0]) == '"EPCOMM_LIB"':
                return True
        elif node.type == "argument_list":
            values = [jl.text(a) for a, _keyword in jl.arguments(node)]
            if any(a == "ENV" and b == '"EPCOMM_LIB"' for a, b in zip(values, values[1:])):
                return True
    return False


def sets_library_path(tree) -> bool:
    """An assignment `libepcomm_path[] = ...` (or `LibEpComm.libepcomm_path[] = ...`)."""
    for node in jl.walk(tree):
        if node.type != "assignment" or jl.text(node.children[1]) != "=":
            continue
        target = jl.code_children(node)[0]
        parts = jl.code_children(target) if target.type == "index_expression" else []
        if (
            len(parts) == 2
            and jl.dotted_last(parts[0]) == "libepcomm_path"
            and parts[1].type == "vector_expression"
            and not jl.code_children(parts[1])
        ):
            return True
    return False


def check_init(package, report) -> Tuple[List[str], str]:
    """The library path comes from ENV["EPCOMM_LIB"] or the preference and is stored where
    the wrappers read it; all of it code in the syntax tree, not text in a comment or a
    message."""
    errors = []
    main = package.directory / "src" / "EpComm.jl"
    tree = package.trees.get(main)
    at = report.where(main, 1)
    module = next((n for n in jl.walk(tree) if n.type == "module_definition"), None) if tree else None
    if module is None or jl.text(jl.code_children(module)[0]) != "EpComm":
        errors.append(f"{at}: src/EpComm.jl must define `module EpComm`")
    calls = jl.calls(tree) if tree else []
    if not any(c.name == "include" and [jl.text(a) for a, _k in c.arguments] == ['"LibEpComm.jl"'] for c in calls):
        errors.append(f'{at}: src/EpComm.jl must include("LibEpComm.jl")')
    _consts, _structs, functions = jl.definitions(tree, str(main)) if tree else ((), (), ())
    if not any(f.name == "__init__" and not f.params for f in functions):
        errors.append(f"{at}: src/EpComm.jl has no function __init__()")
    reads = sets = prefers = False
    for path in package.under("src"):
        if path == package.lib_path:
            continue
        tree = package.trees[path]
        reads |= reads_epcomm_lib(tree)
        prefers |= any(c.name == "load_preference" for c in jl.calls(tree))
        sets |= sets_library_path(tree)
    if not reads:
        errors.append(f'{at}: nothing in src/ reads ENV["EPCOMM_LIB"] (code, not a comment or message)')
    if not prefers:
        errors.append(f"{at}: nothing in src/ calls load_preference (the library's location, Preferences.jl)")
    if not sets:
        errors.append(f"{at}: nothing in src/ sets libepcomm_path[] (the library every wrapper calls)")
    return errors, (
        '__init__ exists; src/ reads ENV["EPCOMM_LIB"] and the Preferences.jl location (load_preference) '
        "and sets libepcomm_path[] (in code)"
    )


def defined_names(package) -> set:
    """Names src/ defines at any level: functions, structs, constants (LibEpComm included)."""
    names = set()
    for path in package.under("src"):
        try:
            consts, structs, functions = jl.definitions(package.trees[path], str(path))
        except jl.FormError:
            continue  # reported by the uses check
        names |= {c.name for c in consts} | {s.name for s in structs} | {f.name for f in functions}
    return names


def check_exports_and_readme(package, report) -> Tuple[List[str], str]:
    """Exported names are defined; the README's Julia code parses and the `EpComm.name`s it
    uses exist."""
    errors = []
    names = defined_names(package)
    main = package.directory / "src" / "EpComm.jl"
    tree = package.trees.get(main)
    exported = [
        (jl.text(name), jl.line_of(name))
        for node in (jl.walk(tree) if tree else ())
        if node.type == "export_statement"
        for name in jl.code_children(node)
    ]
    for name, line in exported:
        if name not in names:
            errors.append(f"{report.where(main, line)}: `export {name}`, but src/ defines no {name}")
    readme = package.directory / "README.md"
    blocks = 0
    if not readme.exists():
        errors.append(f"{report.where(readme, 1)}: the package has no README.md")
    else:
        text = readme.read_text(encoding="utf-8")
        for m in re.finditer(r"^```julia\n(.*?)^```", text, re.S | re.M):
            blocks += 1
            first_line = text[: m.start(1)].count("\n") + 1
            code, parse_errors = julia_treesitter.parse(m.group(1))
            for line, message in parse_errors:
                errors.append(f"{report.where(readme, first_line + line - 1)}: README example: {message}")
            if parse_errors:
                continue
            for node in jl.walk(code):
                parts = jl.code_children(node) if node.type == "field_expression" else []
                if (
                    len(parts) == 2
                    and parts[0].type == "identifier"
                    and jl.text(parts[0]) == "EpComm"
                    and parts[1].type == "identifier"
                    and jl.text(parts[1]) not in names
                ):
                    errors.append(
                        f"{report.where(readme, first_line + jl.line_of(parts[1]) - 1)}: README example "
                        f"uses EpComm.{jl.text(parts[1])}, which src/ does not define"
                    )
    return errors, (
        f"{len(exported)} exported names defined; README: {blocks} Julia example(s) "
        "parse (tree-sitter-julia) and use existing EpComm names"
    )
