# SPDX-License-Identifier: Apache-2.0
"""Project.toml of EpComm.jl: parse it and check what Julia's package manager would.

Python 3.11+ has tomllib; older Pythons get `parse_minimal`, which reads the subset a Julia
Project.toml uses (tables, `key = "string"`, one-line string arrays, numbers, booleans). Where
tomllib exists both parsers run and must agree, so the fallback stays honest.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Tuple

try:
    import tomllib  # Python >= 3.11
except ModuleNotFoundError:  # pragma: no cover - exercised on Python < 3.11
    tomllib = None

# Standard libraries a dependency may name (name -> UUID, from each stdlib's Project.toml).
# Add an entry when the package needs another stdlib; anything else is not allowed in [deps].
STDLIBS = {
    "Libdl": "8f399da3-3557-5675-b5ff-fb832c97cbdb",
    "Test": "8dfed614-e22c-5e08-85e1-65c5234f0b40",
}
CUDA_UUID = "052768ef-5323-5732-b1bb-66c8b64840ba"  # the registered CUDA.jl
# The registered packages [deps] may name besides stdlibs, each with its [compat] entry:
# Preferences.jl, where the library location is set (LocalPreferences.toml).
REGISTERED = {"Preferences": ("21216c6a-2e73-6563-6e65-726566657250", "1")}
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
EXPECTED_EXTENSIONS = {"EpCommCUDAExt": ["CUDA"]}
MINIMUM_JULIA = (1, 9)  # package extensions ([weakdeps], [extensions]) need Julia 1.9


class TomlError(Exception):
    pass


def parse_minimal(text: str) -> Dict[str, object]:
    data: Dict[str, object] = {}
    table = data
    for number, raw in enumerate(text.split("\n"), start=1):
        line = strip_comment(raw).strip()
        if not line:
            continue
        if line.startswith("["):
            m = re.fullmatch(r"\[\s*([A-Za-z0-9_.-]+)\s*\]", line)
            if not m:
                raise TomlError(f"line {number}: unsupported table header {line!r}")
            table = data
            for part in m.group(1).split("."):
                table = table.setdefault(part, {})  # type: ignore[assignment]
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise TomlError(f"line {number}: expected key = value, got {line!r}")
        key = key.strip().strip('"')
        if not re.fullmatch(r"[A-Za-z0-9_-]+", key):
            raise TomlError(f"line {number}: unsupported key {key!r}")
        if key in table:
            raise TomlError(f"line {number}: duplicate key {key!r}")
        table[key] = parse_value(value.strip(), number)
    return data


def strip_comment(line: str) -> str:
    quoted = False
    for i, c in enumerate(line):
        if c == '"':
            quoted = not quoted
        elif c == "#" and not quoted:
            return line[:i]
    return line


def parse_value(value: str, number: int):
    if re.fullmatch(r'"([^"\\]|\\.)*"', value):
        return value[1:-1].encode().decode("unicode_escape")
    if value in ("true", "false"):
        return value == "true"
    if re.fullmatch(r"[-+]?\d+", value):
        return int(value)
    if value.startswith("[") and value.endswith("]"):
        inner = value[1:-1].strip()
        if not inner:
            return []
        return [parse_value(v.strip(), number) for v in inner.rstrip(",").split(",")]
    raise TomlError(
        f"line {number}: unsupported value {value!r} (the fallback parser reads "
        "strings, one-line arrays, integers and booleans)"
    )


def julia_lower_bound(spec: str) -> Tuple[int, ...]:
    """The smallest version a Pkg compat spec allows ("1.9" -> (1, 9); "1.6, 1.9" -> (1, 6))."""
    bounds = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*[\^~=]?\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?\s*", part)
        if not m:
            raise TomlError(f"cannot read the compat spec {spec!r}")
        bounds.append(tuple(int(g or 0) for g in m.groups()))
    return min(bounds)


def check_project(package_dir: Path, report) -> Tuple[List[str], str]:
    path = package_dir / "Project.toml"
    where = report.where(path, 1)
    if not path.exists():
        return [f"{where}: missing"], ""
    text = path.read_text(encoding="utf-8")
    errors: List[str] = []
    try:
        minimal = parse_minimal(text)
    except TomlError as error:
        return [f"{where}: the fallback TOML parser (Python < 3.11) cannot read it: {error}"], ""
    data = minimal
    parsers = "fallback parser"
    if tomllib is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            return [f"{where}: not valid TOML: {error}"], ""
        parsers = "tomllib and the fallback parser agree"
        if data != minimal:
            errors.append(f"{where}: tomllib and the fallback parser read it differently: {data!r} vs {minimal!r}")

    if data.get("name") != "EpComm":
        errors.append(f'{where}: name must be "EpComm", not {data.get("name")!r}')
    uuid = str(data.get("uuid", ""))
    if not UUID.fullmatch(uuid) or uuid in STDLIBS.values() or uuid == CUDA_UUID:
        errors.append(f"{where}: uuid {uuid!r} must be the package's own lower-case UUID")
    if not re.fullmatch(r"\d+\.\d+\.\d+", str(data.get("version", ""))):
        errors.append(f"{where}: version {data.get('version')!r} must be MAJOR.MINOR.PATCH")

    deps = data.get("deps", {})
    for name, value in deps.items():
        if name in REGISTERED and REGISTERED[name][0] == value:
            if str(data.get("compat", {}).get(name, "")) != REGISTERED[name][1]:
                errors.append(f'{where}: [compat] {name} must be "{REGISTERED[name][1]}"')
        elif STDLIBS.get(name) != value:
            allowed = {**STDLIBS, **{k: v[0] for k, v in REGISTERED.items()}}
            errors.append(
                f"{where}: [deps] {name} = {value!r} is not a known standard library "
                f"(allowed: {', '.join(f'{k} = {v}' for k, v in allowed.items())})"
            )
    weakdeps = data.get("weakdeps", {})
    if weakdeps != {"CUDA": CUDA_UUID}:
        errors.append(f'{where}: [weakdeps] must be exactly CUDA = "{CUDA_UUID}", not {weakdeps!r}')
    extensions = {k: ([v] if isinstance(v, str) else v) for k, v in data.get("extensions", {}).items()}
    if extensions != EXPECTED_EXTENSIONS:
        errors.append(f'{where}: [extensions] must be EpCommCUDAExt = "CUDA", not {extensions!r}')
    for name in extensions:
        candidates = [package_dir / "ext" / f"{name}.jl", package_dir / "ext" / name / f"{name}.jl"]
        found = [c for c in candidates if c.exists()]
        if not found:
            errors.append(f"{where}: extension {name} has no ext/{name}.jl")
        elif not re.search(rf"^module {name}\b", found[0].read_text(encoding="utf-8"), re.M):
            errors.append(f"{report.where(found[0], 1)}: must define `module {name}`")
    for name in data.get("extras", {}):
        if STDLIBS.get(name) != data["extras"][name]:
            errors.append(f"{where}: [extras] {name} is not a known standard library")
    for target, names in data.get("targets", {}).items():
        for name in names:
            if name not in data.get("extras", {}) and name not in deps:
                errors.append(f"{where}: [targets] {target} names {name}, which is not in [extras] or [deps]")

    compat = data.get("compat", {})
    julia = compat.get("julia")
    if julia is None:
        errors.append(f'{where}: [compat] needs julia = "1.9" (package extensions need Julia 1.9)')
    else:
        try:
            if julia_lower_bound(julia)[:2] < MINIMUM_JULIA:
                errors.append(
                    f"{where}: [compat] julia = {julia!r} allows Julia before 1.9, which has no package extensions"
                )
        except TomlError as error:
            errors.append(f"{where}: {error}")
    for name in weakdeps:
        if name not in compat:
            errors.append(f"{where}: [compat] has no entry for the weak dependency {name}")
    summary = (
        f"Project.toml ({parsers}): name EpComm, deps {sorted(deps)} (stdlib and Preferences), "
        f"weakdeps CUDA {CUDA_UUID}, extension EpCommCUDAExt -> ext/EpCommCUDAExt.jl, "
        f"compat julia {julia!r}"
    )
    return errors, summary
