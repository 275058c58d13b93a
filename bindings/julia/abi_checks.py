# SPDX-License-Identifier: Apache-2.0
"""The ABI checks of check_julia.py: foreign calls, wrappers, declarations, struct layouts.

Each check takes the header model (tools/epcomm_header.py), what julia_forms.py read from
the package's syntax tree, and returns (errors, summary): `file:line: message` strings and one line saying
what was proven when there are none.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import julia_forms as jl
from c_julia_types import CTypes, JuliaTypes

LIBRARY_EXPRESSIONS = {"libepcomm()", "LibEpComm.libepcomm()"}
INTEGER_RANGES = {
    "Int8": (-(2**7), 2**7 - 1),
    "Int16": (-(2**15), 2**15 - 1),
    "Int32": (-(2**31), 2**31 - 1),
    "Cint": (-(2**31), 2**31 - 1),
    "Int64": (-(2**63), 2**63 - 1),
    "Int": (-(2**63), 2**63 - 1),
    "UInt8": (0, 2**8 - 1),
    "UInt16": (0, 2**16 - 1),
    "UInt32": (0, 2**32 - 1),
    "Cuint": (0, 2**32 - 1),
    "UInt64": (0, 2**64 - 1),
    "UInt": (0, 2**64 - 1),
    "Csize_t": (0, 2**64 - 1),
}


def check_calls(sites: List[jl.CallSite], header, ctypes: CTypes, julia: JuliaTypes, report) -> Tuple[List[str], str]:
    errors, args = [], 0
    for site in sites:
        at = report.where(site.path, site.line)
        if not site.function:
            errors.append(
                f"{at}: {site.form} through a function pointer ({site.library}); "
                "call the named function through libepcomm() instead"
            )
            continue
        function = header.functions.get(site.function)
        if function is None:
            errors.append(f"{at}: {site.form} calls {site.function}, which epcomm.h does not declare")
            continue
        if site.library not in LIBRARY_EXPRESSIONS:
            errors.append(
                f"{at}: {site.function} is called through the library "
                f"{site.library or '(none: the process)'!r}; use libepcomm() "
                "(the path EpComm.__init__ set)"
            )
        if site.varargs:
            errors.append(f"{at}: {site.function} is not variadic in C; remove the `;`")
        if len(site.arg_types) != len(function.params):
            errors.append(
                f"{at}: {site.function} is called with {len(site.arg_types)} arguments; "
                f"C declares {len(function.params)} ({c_signature(function)})"
            )
            continue
        if site.form == "ccall" and len(site.arg_values) != len(site.arg_types):
            errors.append(
                f"{at}: ccall {site.function} lists {len(site.arg_types)} types "
                f"but passes {len(site.arg_values)} values"
            )
        for index, (param, jtype) in enumerate(zip(function.params, site.arg_types)):
            reason = julia.match(ctypes.parse(param.type), jtype, "parameter")
            if reason:
                errors.append(f"{at}: {site.function} argument {index + 1} ({param.name}, C {param.type}): {reason}")
        reason = julia.match(ctypes.parse(function.return_type), site.return_type, "return")
        if reason:
            errors.append(f"{at}: {site.function} returns C {function.return_type}: {reason}")
        args += len(site.arg_types)
    forms = {f: sum(1 for s in sites if s.form == f) for f in ("@ccall", "ccall")}
    return errors, (
        f"{len(sites)} foreign calls ({forms['@ccall']} @ccall, {forms['ccall']} ccall) "
        f"in src/ and ext/: names, library libepcomm(), {args} argument types and "
        f"{len(sites)} return types match epcomm.h"
    )


def c_signature(function) -> str:
    params = ", ".join(f"{p.type} {p.name or ''}".strip() for p in function.params) or "void"
    return f"{function.return_type} {function.name}({params})"


def check_wrappers(header, functions, sites, lib_path, report) -> Tuple[List[str], str]:
    errors = []
    by_name = {f.name: f for f in functions}
    for name, function in header.functions.items():
        wrapper = by_name.get(name)
        if wrapper is None:
            errors.append(
                f"{report.where(lib_path, 1)}: {name} ({c_signature(function)}) has no "
                "wrapper in LibEpComm.jl; run python3 tools/bindgen/generate.py"
            )
            continue
        at = report.where(lib_path, wrapper.line)
        if len(wrapper.params) != len(function.params):
            errors.append(
                f"{at}: wrapper {name} takes {len(wrapper.params)} arguments; C declares {len(function.params)}"
            )
        inside = [s for s in sites if s.path == str(lib_path) and wrapper.start <= s.start < wrapper.stop]
        calls = [s for s in inside if s.function == name]
        if len(calls) != 1 or len(inside) != 1:
            errors.append(
                f"{at}: wrapper {name} must make exactly one foreign call, to {name}; "
                f"found {[s.function for s in inside]}"
            )
            continue
        if calls[0].arg_values != wrapper.params[: len(calls[0].arg_values)] or len(calls[0].arg_values) != len(
            wrapper.params
        ):
            errors.append(
                f"{at}: wrapper {name}({', '.join(wrapper.params)}) passes "
                f"({', '.join(calls[0].arg_values)}); it must pass its parameters in order"
            )
    for wrapper in functions:
        if wrapper.name.startswith("epc_") and wrapper.name not in header.functions:
            errors.append(
                f"{report.where(lib_path, wrapper.line)}: wrapper {wrapper.name} has no "
                "C function in epcomm.h (stale; regenerate)"
            )
    return errors, (
        f"{len(header.functions)}/{len(header.functions)} header functions wrapped, "
        "each passing its parameters in order"
    )


def constant_value(const: jl.Const) -> Tuple[Optional[str], Optional[int]]:
    """`T(value)` -> (T, value); a bare literal -> (None, value); else (None, None); the value
    is an integer literal, negated or not."""
    rhs, type_name = const.rhs, None
    if rhs.type == "call_expression":
        callee, argument_list = jl.call_parts(rhs)
        args = jl.arguments(argument_list) if argument_list is not None else []
        if callee is None or callee.type != "identifier" or len(args) != 1 or args[0][1]:
            return None, None
        type_name, rhs = jl.text(callee), args[0][0]
    negative = 1
    if rhs.type == "unary_expression" and type_name is not None:
        children = rhs.children
        if len(children) != 2 or jl.text(children[0]) != "-":
            return None, None
        negative, rhs = -1, children[1]
    if rhs.type != "integer_literal":
        return None, None
    value = jl.parse_int_literal(jl.text(rhs))
    return type_name, None if value is None else negative * value


def check_declarations(
    header, snapshot, consts, structs, julia: JuliaTypes, ctypes: CTypes, lib_path, report
) -> Tuple[List[str], str]:
    errors: List[str] = []
    at = lambda line: report.where(lib_path, line)  # noqa: E731
    const_by_name = {c.name: c for c in consts}
    fields_checked = 0
    for typedef in header.typedefs.values():
        if typedef.kind in ("alias", "function_pointer"):
            alias = julia.aliases.get(typedef.name)
            if alias is None:
                errors.append(f"{at(1)}: typedef {typedef.name} has no `const {typedef.name} = ...` alias")
                continue
            c = ctypes.parse(typedef.target if typedef.kind == "alias" else typedef.target)
            reason = julia.match(c, alias, "field")
            if reason:
                errors.append(f"{at(const_by_name[typedef.name].line)}: {typedef.name}: {reason}")
        elif typedef.kind == "opaque":
            definition = julia.structs.get(typedef.name)
            if definition is None or not definition.mutable or definition.fields:
                errors.append(f"{at(1)}: opaque {typedef.name} must be `mutable struct {typedef.name} end`")
    for struct in header.structs.values():
        definition = julia.structs.get(struct.name)
        if definition is None:
            errors.append(f"{at(1)}: struct {struct.name} has no Julia struct in LibEpComm.jl")
            continue
        if definition.mutable:
            errors.append(
                f"{at(definition.line)}: {struct.name} must be an immutable struct "
                "(a mutable struct is not stored inline and has no C layout)"
            )
        names = [f[0] for f in definition.fields]
        if names != [f.name for f in struct.fields]:
            errors.append(
                f"{at(definition.line)}: {struct.name} fields are {names}; "
                f"C declares {[f.name for f in struct.fields]} (same names, same order)"
            )
            continue
        for cfield, (name, jtype, line) in zip(struct.fields, definition.fields):
            fields_checked += 1
            reason = field_type_error(cfield, jtype, julia, ctypes)
            if reason:
                errors.append(f"{at(line)}: {struct.name}.{name} (C {cfield.c_type}): {reason}")
    snapshot_constants = snapshot.get("constants", {})
    for constant in header.constants.values():
        const = const_by_name.get(constant.name)
        if const is None:
            errors.append(f"{at(1)}: constant {constant.name} = {constant.value} is missing")
            continue
        type_name, value = constant_value(const)
        if value is None:
            errors.append(
                f"{at(const.line)}: {constant.name} must be `const {constant.name} = "
                f"T({constant.value})` with an integer literal"
            )
            continue
        if value != constant.value:
            errors.append(f"{at(const.line)}: {constant.name} is {value}; the header says {constant.value}")
        if constant.name in snapshot_constants and snapshot_constants[constant.name] != constant.value:
            errors.append(
                f"{at(const.line)}: {constant.name} is {snapshot_constants[constant.name]} "
                f"in the ABI snapshot but {constant.value} in the header"
            )
        if type_name is not None:
            resolved = julia.resolve(jl.TypeExpr(type_name)).base
            low_high = INTEGER_RANGES.get(resolved)
            if low_high is None:
                errors.append(f"{at(const.line)}: {constant.name} has type {type_name}, not an integer type")
            elif not low_high[0] <= value <= low_high[1]:
                errors.append(f"{at(const.line)}: {constant.name} = {value} does not fit {type_name}")
    return errors, (
        f"{len(header.typedefs)} typedefs, {len(header.structs)} structs "
        f"({fields_checked} fields typed as in epcomm.h), {len(header.constants)} "
        "constants (values = header = snapshot)"
    )


def field_type_error(cfield, jtype: jl.TypeExpr, julia: JuliaTypes, ctypes: CTypes) -> Optional[str]:
    c = ctypes.parse(cfield.type)
    if cfield.array_length is None:
        return julia.match(c, jtype, "field")
    resolved = julia.resolve(jtype)
    if resolved.base != "NTuple" or len(resolved.args) != 2 or resolved.args[0].number is None:
        return f"a C array [{cfield.array_length}] must be NTuple{{{cfield.array_length}, T}}, not {jtype}"
    if resolved.args[0].number != cfield.array_length:
        return f"NTuple length {resolved.args[0].number}; C declares [{cfield.array_expr}] = {cfield.array_length}"
    return julia.match(c, resolved.args[1], "field")


def check_layout(structs, julia: JuliaTypes, snapshot, version: str, lib_path, report) -> Tuple[List[str], str]:
    errors, checked, offsets = [], 0, 0
    snapshot_structs = snapshot.get("structs", {})
    for definition in structs:
        if definition.mutable:
            continue
        at = report.where(lib_path, definition.line)
        expected = snapshot_structs.get(definition.name)
        if expected is None:
            errors.append(
                f"{at}: struct {definition.name} is not in the ABI snapshot {version}; "
                "its layout cannot be verified (update capi/abi.json)"
            )
            continue
        try:
            size, align, fields = julia.struct_layout(definition)
        except ValueError as reason:
            errors.append(f"{at}: {definition.name}: {reason}")
            continue
        checked += 1
        if size != expected["size"] or align != expected["align"]:
            errors.append(
                f"{at}: {definition.name} has Julia size {size} and alignment {align}; "
                f"the snapshot says {expected['size']} and {expected['align']}"
            )
        expected_fields = expected["fields"]
        if set(expected_fields) != {f[0] for f in fields}:
            errors.append(
                f"{at}: {definition.name} fields {sorted(f[0] for f in fields)} differ from "
                f"the snapshot's {sorted(expected_fields)}"
            )
        for name, offset, field_size in fields:
            want = expected_fields.get(name)
            if want is None:
                continue
            offsets += 1
            if offset != want["offset"] or field_size != want["size"]:
                line = next(l for n, _t, l in definition.fields if n == name)
                errors.append(
                    f"{report.where(lib_path, line)}: {definition.name}.{name} is at offset "
                    f"{offset} with size {field_size}; the snapshot says offset "
                    f"{want['offset']}, size {want['size']}"
                )
    return errors, (
        f"{checked} structs: size, alignment and {offsets} field offsets and sizes = ABI snapshot {version}"
    )
