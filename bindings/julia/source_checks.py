# SPDX-License-Identifier: Apache-2.0
"""The source checks of check_julia.py: how the safe layer, the extension, the tests and the
README use LibEpComm, and what __init__ and the exports promise.

Each check returns (errors, summary), like abi_checks.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Tuple

import julia_syntax as jl
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


def check_uses(package, header, lib_names: set, sites, report) -> Tuple[List[str], str]:
    errors, calls, names = [], 0, 0
    spans = {}
    for site in sites:
        spans.setdefault(site.path, []).append((site.start, site.stop))
    for path in package.under("src", "ext", "test"):
        if path == package.lib_path:
            continue
        tokens = package.files[path]
        inside = spans.get(str(path), [])
        for i, tok in enumerate(tokens):
            if tok.kind != "ident":
                continue
            at = report.where(path, tok.line)
            if re.fullmatch(r"EPC_[A-Z0-9_]+", tok.text):
                names += 1
                if tok.text not in header.constants:
                    errors.append(f"{at}: {tok.text} is not a constant of epcomm.h")
            previous = tokens[i - 1] if i else None
            if previous is not None and previous.text == "." and i >= 2 and tokens[i - 2].text == "LibEpComm":
                if tok.text not in lib_names:
                    errors.append(f"{at}: LibEpComm.{tok.text} does not exist")
            if (
                tok.text.startswith("epc_")
                and i + 1 < len(tokens)
                and tokens[i + 1].text == "("
                and not tokens[i + 1].space_before
                and not any(a <= i < b for a, b in inside)
                and not (previous is not None and previous.text == "function")
            ):
                function = header.functions.get(tok.text)
                if function is None:
                    errors.append(f"{at}: {tok.text} is not a function of epcomm.h")
                    continue
                count = len(jl.positional(tokens[i + 2 : jl.matching(tokens, i + 1)]))
                calls += 1
                if count != len(function.params):
                    errors.append(
                        f"{at}: {tok.text} is called with {count} arguments; "
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
        tokens = package.files[path]
        try:
            _consts, structs, _functions = jl.definitions(tokens, package.blocks[path], str(path))
        except jl.JuliaSyntaxError as error:
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
        for i, tok in enumerate(tokens):
            if (
                tok.kind != "ident"
                or tok.text not in STRUCT_BUILDERS
                or i + 1 >= len(tokens)
                or tokens[i + 1].text != "("
                or (i and tokens[i - 1].text == "function")
            ):
                continue
            parts = jl.split_top(tokens[i + 2 : jl.matching(tokens, i + 1)], (",", ";"))
            if not parts or jl.text_of(parts[0]) not in header.structs:
                continue
            c_name = jl.text_of(parts[0])
            c_fields = {f.name for f in header.structs[c_name].fields}
            built += 1
            keywords = False
            for part in parts[1:]:
                if part and part[0].text == ";":
                    keywords, part = True, part[1:]
                if not keywords or not part or part[-1].text == "...":
                    continue  # positional, or splatted: not checkable here
                name = part[0].text
                if name not in c_fields:
                    errors.append(
                        f"{report.where(path, part[0].line)}: {tok.text}({c_name}; {name} = ...): "
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
        tokens = package.files[path]
        for i, tok in enumerate(tokens):
            if (
                tok.kind == "ident"
                and tok.text.startswith("epc_")
                and i + 1 < len(tokens)
                and tokens[i + 1].text == "("
                and not tokens[i + 1].space_before
                and not (i and tokens[i - 1].text == "function")
            ):
                called.setdefault(tok.text, report.where(path, tok.line))
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


def check_init(package, report) -> Tuple[List[str], str]:
    """The library path comes from ENV["EPCOMM_LIB"] and is stored where the wrappers read it;
    both must be code (tokens), not text in a comment or a message."""
    errors = []
    main = package.directory / "src" / "EpComm.jl"
    tokens = package.files.get(main, [])
    texts = [t.text for t in tokens]
    at = report.where(main, 1)
    if "module" not in texts or texts[texts.index("module") + 1] != "EpComm":
        errors.append(f"{at}: src/EpComm.jl must define `module EpComm`")
    if not contains(tokens, ["include", "(", '"LibEpComm.jl"', ")"]):
        errors.append(f'{at}: src/EpComm.jl must include("LibEpComm.jl")')
    if not contains(tokens, ["function", "__init__", "(", ")"]):
        errors.append(f"{at}: src/EpComm.jl has no function __init__()")
    reads = sets = prefers = False
    for path in package.under("src"):
        if path == package.lib_path:
            continue
        code = package.files[path]
        reads |= contains(code, ["ENV", ",", '"EPCOMM_LIB"']) or contains(code, ["ENV", "[", '"EPCOMM_LIB"'])
        prefers |= contains(code, ["load_preference", "("])
        sets |= contains(code, ["libepcomm_path", "[", "]", "="])
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
            consts, structs, functions = jl.definitions(package.files[path], package.blocks[path], str(path))
        except jl.JuliaSyntaxError:
            continue  # reported by the uses check
        names |= {c.name for c in consts} | {s.name for s in structs} | {f.name for f in functions}
    return names


def check_exports_and_readme(package, report) -> Tuple[List[str], str]:
    """Exported names are defined; the README's Julia code lexes, its blocks balance, and the
    `EpComm.name`s it uses exist."""
    errors = []
    names = defined_names(package)
    main = package.directory / "src" / "EpComm.jl"
    tokens = package.files.get(main, [])
    exported = []
    for i, tok in enumerate(tokens):
        if tok.kind == "keyword" and tok.text == "export":
            line, j = [], i + 1
            while j < len(tokens) and not (tokens[j].kind == "newline" and line and line[-1].text != ","):
                if tokens[j].kind != "newline":
                    line.append(tokens[j])  # a trailing comma continues the list
                j += 1
            for part in jl.split_top(line):
                exported.append((jl.text_of(part), part[0].line))
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
            parse_errors = julia_treesitter.syntax_errors(m.group(1))
            for line, message in parse_errors:
                errors.append(f"{report.where(readme, first_line + line - 1)}: README example: {message}")
            if parse_errors:
                continue
            try:
                code = jl.tokenize(m.group(1), str(readme))
                jl.blocks(code, str(readme))
            except jl.JuliaSyntaxError as error:
                errors.append(f"{report.where(readme, first_line + error.line - 1)}: README example: {error.message}")
                continue
            for i, tok in enumerate(code[2:], start=2):
                if (
                    code[i - 1].text == "."
                    and code[i - 2].text == "EpComm"
                    and tok.kind == "ident"
                    and tok.text not in names
                ):
                    errors.append(
                        f"{report.where(readme, first_line + tok.line - 1)}: README example "
                        f"uses EpComm.{tok.text}, which src/ does not define"
                    )
    return errors, (
        f"{len(exported)} exported names defined; README: {blocks} Julia example(s) "
        "parse (tree-sitter-julia), lex, balance and use existing EpComm names"
    )


def contains(tokens: List[jl.Token], sequence: List[str]) -> bool:
    texts = [t.text for t in tokens if t.kind != "newline"]
    n = len(sequence)
    return any(texts[i : i + n] == sequence for i in range(len(texts) - n + 1))
