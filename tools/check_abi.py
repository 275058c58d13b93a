#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Test: the built ABI (header + library) against the committed snapshot capi/abi.json.

1. The dump of this build must equal the snapshot's entry for the header's version
   (EPC_ABI_MAJOR.MINOR.PATCH): any ABI change is an explicit, reviewed re-record.
2. Within one major the ABI only grows (ARCHITECTURE.md section 2), so the dump must be a
   superset of every snapshot entry with the same major: structs still exist and do not
   shrink, fields keep offset and size (a reserved field may take a name), constants keep their values, typedefs keep their
   size, functions keep their signature, symbols keep their version node.
3. Structs have no implicit padding (section 2: "explicit reserved padding"), because
   padding bytes are neither zeroed by EPC_*_INIT nor visible to bindings.

Exit status 0 when all hold; otherwise one line per difference and status 1.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from abi_dump import DumpError, dump_abi  # noqa: E402
from epcomm_header import DEFAULT_HEADER, HeaderError, parse_header  # noqa: E402

# These name the version itself, so they change with every minor/patch bump by design.
VERSION_CONSTANTS = {"EPC_ABI_MINOR", "EPC_ABI_PATCH", "EPC_ABI_VERSION"}


def version_tuple(version: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def keyed(dump: dict) -> dict:
    """The dump with its function list turned into a dict by name, so that a generic
    recursive comparison names the function that differs."""
    result = dict(dump)
    result["functions"] = {f["name"]: f for f in dump.get("functions", [])}
    return result


def exact_differences(snapshot: object, build: object, path: str, version: str) -> List[str]:
    if isinstance(snapshot, dict) and isinstance(build, dict):
        messages: List[str] = []
        for key in sorted(set(snapshot) | set(build)):
            where = f"{path}.{key}" if path else key
            if key not in build:
                messages.append(f"{where}: in the {version} snapshot but not in this build")
            elif key not in snapshot:
                messages.append(f"{where}: in this build but not in the {version} snapshot")
            else:
                messages += exact_differences(snapshot[key], build[key], where, version)
        return messages
    if snapshot != build:
        return [f"{path}: {json.dumps(snapshot)} in the {version} snapshot, {json.dumps(build)} in this build"]
    return []


def is_extensible(struct: dict) -> bool:
    """Extensible structs start with struct_size and abi_version (section 2)."""
    fields = struct["fields"]
    return fields.get("struct_size", {}).get("offset") == 0 and fields.get("abi_version", {}).get("offset") == 4


def superset_differences(old: dict, new: dict, version: str) -> List[str]:
    """What this build lost or changed relative to the older (or other) entry `old`."""
    messages: List[str] = []
    label = f"ABI {version}"

    for name, old_struct in old.get("structs", {}).items():
        new_struct = new["structs"].get(name)
        if new_struct is None:
            messages.append(f"struct {name} (in {label}) was removed")
            continue
        if new_struct["size"] < old_struct["size"]:
            messages.append(f"struct {name} shrank from {old_struct['size']} bytes ({label}) to {new_struct['size']}")
        elif new_struct["size"] != old_struct["size"] and not is_extensible(old_struct):
            # Callers allocate these (and EpcPlanRegion sits in an array), so any growth
            # moves data under an older caller's feet.
            messages.append(
                f"struct {name} is not extensible (no struct_size/abi_version "
                f"header) yet its size changed from {old_struct['size']} bytes "
                f"({label}) to {new_struct['size']}"
            )
        if new_struct["align"] != old_struct["align"]:
            messages.append(
                f"struct {name} alignment changed from {old_struct['align']} ({label}) to {new_struct['align']}"
            )
        for field_name, old_field in old_struct["fields"].items():
            new_field = new_struct["fields"].get(field_name)
            if new_field is None and field_name.startswith("reserved"):
                # Reserved fields exist to be given a meaning later: one at the same offset
                # and size under a new name is that, not a removal.
                new_field = next(
                    (
                        f
                        for f in new_struct["fields"].values()
                        if f["offset"] == old_field["offset"] and f["size"] == old_field["size"]
                    ),
                    None,
                )
            if new_field is None:
                messages.append(
                    f"field {name}.{field_name} (offset {old_field['offset']}, "
                    f"{old_field['size']} bytes in {label}) was removed"
                )
                continue
            for key in ("offset", "size"):
                if new_field[key] != old_field[key]:
                    messages.append(
                        f"field {name}.{field_name}: {key} changed from {old_field[key]} ({label}) to {new_field[key]}"
                    )

    for name, value in old.get("constants", {}).items():
        if name in VERSION_CONSTANTS:
            continue
        if name not in new["constants"]:
            messages.append(f"constant {name} (= {value} in {label}) was removed")
        elif new["constants"][name] != value:
            messages.append(f"constant {name} changed from {value} ({label}) to {new['constants'][name]}")

    for name, old_typedef in old.get("typedefs", {}).items():
        new_typedef = new.get("typedefs", {}).get(name)
        if new_typedef is None:
            messages.append(f"typedef {name} (in {label}) was removed")
            continue
        for key in ("kind", "type", "size", "align"):
            if old_typedef.get(key) != new_typedef.get(key):
                messages.append(
                    f"typedef {name}: {key} changed from {old_typedef.get(key)!r} ({label}) to {new_typedef.get(key)!r}"
                )

    new_functions = {f["name"]: f for f in new.get("functions", [])}
    for old_function in old.get("functions", []):
        name = old_function["name"]
        new_function = new_functions.get(name)
        if new_function is None:
            messages.append(f"function {name} (in {label}) was removed from the header")
            continue
        old_sig = (old_function["return_type"], old_function["params"])
        new_sig = (new_function["return_type"], new_function["params"])
        if old_sig != new_sig:
            messages.append(
                f"function {name}: signature changed from {signature(old_sig)} ({label}) to {signature(new_sig)}"
            )

    old_symbols: Dict[str, str] = old.get("symbols", {})
    new_symbols: Dict[str, str] = new.get("symbols", {})
    for name, node in old_symbols.items():
        if name not in new_symbols:
            messages.append(f"symbol {name}@@{node} (in {label}) is no longer exported")
        elif new_symbols[name] != node:
            messages.append(f"symbol {name} moved from version node {node} ({label}) to {new_symbols[name]}")
    # A symbol added since `old` must sit at a node `old` did not have; otherwise a program
    # linked against this build would load against the old library and fail only at call time.
    old_nodes = set(old_symbols.values())
    for name, node in new_symbols.items():
        if name not in old_symbols and node in old_nodes:
            messages.append(
                f"symbol {name} is new since {label} but bound at its node {node}; "
                "add a new version node (EPCOMM_<major>.<minor>) to capi/epcomm.map"
            )
    return messages


def signature(sig: Tuple[str, List[str]]) -> str:
    return f"{sig[0]} ({', '.join(sig[1]) or 'void'})"


def padding_differences(dump: dict) -> List[str]:
    messages: List[str] = []
    for name, struct in dump["structs"].items():
        end = 0
        for field_name, f in sorted(struct["fields"].items(), key=lambda item: item[1]["offset"]):
            if f["offset"] != end:
                messages.append(
                    f"struct {name}: {f['offset'] - end} bytes of implicit padding "
                    f"before {field_name} (offset {f['offset']}); add an explicit "
                    "reserved field"
                )
            end = f["offset"] + f["size"]
        if struct["size"] != end:
            messages.append(
                f"struct {name}: {struct['size'] - end} bytes of implicit tail padding; add an explicit reserved field"
            )
    return messages


def record_hint(header: str, library: str, snapshot: str) -> str:
    return (
        f"python3 tools/abi_dump.py --header {shlex.quote(header)} "
        f"--library {shlex.quote(library)} --record {shlex.quote(snapshot)}"
    )


def check(header: str, library: str, snapshot_path: str, cc: Sequence[str], nm: str) -> List[str]:
    version = parse_header(header).abi_version_string()
    major = version.split(".")[0]
    dump = dump_abi(header, cc, library, nm)
    snapshot = json.loads(Path(snapshot_path).read_text())
    versions: Dict[str, dict] = snapshot.get("versions", {})
    failures: List[str] = []

    entry = versions.get(version)
    if entry is None:
        failures.append(
            f"{snapshot_path} has no entry for ABI {version} (the version in {header}). "
            "An ABI change needs a new version: bump EPC_ABI_MINOR in the header (additive "
            f"changes only), then run: {record_hint(header, library, snapshot_path)}"
        )
    else:
        differences = exact_differences(keyed(entry), keyed(dump), "", version)
        failures += [f"snapshot {version}: {d}" for d in differences]
        if differences:
            failures.append(
                f"this build's ABI differs from the committed snapshot of {version}. A released "
                "version must not change: make the change additive, bump EPC_ABI_MINOR, and "
                f"record the new version with: {record_hint(header, library, snapshot_path)}"
            )

    for other in sorted(versions, key=version_tuple):
        if other == version or other.split(".")[0] != major:
            continue
        failures += [f"superset of {other}: {d}" for d in superset_differences(versions[other], dump, other)]

    failures += padding_differences(dump)
    compared = [v for v in versions if v.split(".")[0] == major]
    print(
        f"check_abi: ABI {version}; snapshot versions with major {major}: "
        f"{', '.join(sorted(compared, key=version_tuple)) or 'none'}; "
        f"{len(dump['structs'])} structs, {len(dump['constants'])} constants, "
        f"{len(dump['functions'])} functions, {len(dump['symbols'])} symbols"
    )
    return failures


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="Compare the built ABI with capi/abi.json.")
    parser.add_argument("--header", default=str(DEFAULT_HEADER))
    parser.add_argument("--library", required=True, help="the built libepcomm.so")
    parser.add_argument("--snapshot", default=str(DEFAULT_HEADER.parents[3] / "capi/abi.json"))
    parser.add_argument("--cc", default="cc", help="C compiler command, default: cc")
    parser.add_argument("--nm", default="nm")
    args = parser.parse_args(argv)
    try:
        failures = check(args.header, args.library, args.snapshot, shlex.split(args.cc), args.nm)
    except (HeaderError, DumpError, OSError, ValueError) as error:
        print(f"check_abi: error: {error}", file=sys.stderr)
        return 1
    for failure in failures:
        print(f"FAIL: {failure}")
    if failures:
        print(f"check_abi: {len(failures)} problem(s)")
        return 1
    print("check_abi: OK (matches the snapshot and is a superset of every entry of its major)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
