#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tag and check the Python wheel that `pip wheel .` built (tools/dev.sh wheel runs both).

    tools/check_wheel.py dist/epcomm-*.whl

meson-python tags a wheel with a platform file as cpXY-cpXY-linux_x86_64; the package is
ctypes over a bundled library, so one wheel serves every CPython 3: it is retagged
py3-none-manylinux_2_<G>_x86_64, where 2.<G> is the newest glibc symbol version the library
needs. Then every check below must hold, or the script exits 1 naming what failed:
  - the version is the header's (tools/header_version.py); METADATA pins
    nvidia-nccl-cu13>=2.28.9,<2.29;
  - every file of bindings/python/epcomm/ is in the wheel, with py.typed;
  - epcomm/_lib/libepcomm.so.<major> has that SONAME, no absolute RUNPATH/RPATH, and device
    code for sm_90 and sm_100 plus PTX (read from its .nv_fatbin section);
  - installed with pip into a new virtual environment (its NCCL requirement from the
    package index), `python -m epcomm` exits 0 and reports the bundled library at the
    header's ABI version (no GPU is needed: it says what is missing).
"""

import email.parser
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from typing import List, Set, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from header_version import header_version  # noqa: E402

NCCL_REQUIREMENT = "nvidia-nccl-cu13<2.29,>=2.28.9"
WANTED_SASS = {90, 100}


def elf_sections(data: bytes) -> dict:
    """name -> bytes of each section of a 64-bit little-endian ELF file."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx]
    names_data = data[names[4] : names[4] + names[5]]
    out = {}
    for name, _type, _flags, _addr, offset, size in headers:
        label = names_data[name : names_data.index(b"\0", name)].decode()
        out[label] = data[offset : offset + size]
    return out


def dynamic_strings(data: bytes, sections: dict) -> Tuple[List[str], List[str]]:
    """(SONAME, RUNPATH and RPATH values) from the .dynamic section."""
    dynstr = sections[".dynstr"]
    sonames, paths = [], []
    dynamic = sections[".dynamic"]
    for i in range(0, len(dynamic), 16):
        tag, value = struct.unpack_from("<qQ", dynamic, i)
        if tag in (14, 15, 29):  # DT_SONAME, DT_RPATH, DT_RUNPATH
            text = dynstr[value : dynstr.index(b"\0", value)].decode()
            (sonames if tag == 14 else paths).append(text)
    return sonames, paths


def fatbin_entries(fatbin: bytes) -> Set[Tuple[str, int]]:
    """{("sass" | "ptx", sm)} of every entry of the fat binaries in a .nv_fatbin section."""
    entries = set()
    offset = 0
    while offset + 16 <= len(fatbin):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", fatbin, offset)
        if magic != 0xBA55ED50:
            offset += 8  # sections are padded between fat binaries
            continue
        entry = offset + header_size
        end = entry + fat_size
        while entry < end:
            kind, _flags, entry_header, payload = struct.unpack_from("<HHIQ", fatbin, entry)
            arch = struct.unpack_from("<I", fatbin, entry + 28)[0]
            entries.add(("ptx" if kind == 1 else "sass", arch))
            entry += entry_header + payload
        offset = end
    return entries


def retag(wheel: pathlib.Path, glibc_minor: int) -> pathlib.Path:
    platform = f"manylinux_2_{glibc_minor}_x86_64"
    subprocess.run(
        [sys.executable, "-m", "wheel", "tags", "--python-tag", "py3", "--abi-tag", "none", "--platform-tag", platform,
         "--remove", str(wheel)],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    (tagged,) = wheel.parent.glob(f"epcomm-*-py3-none-{platform}.whl")
    return tagged


def main(path: str) -> int:
    wheel = pathlib.Path(path)
    problems: List[str] = []
    version = header_version()
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = email.parser.Parser().parsestr(archive.read(f"epcomm-{version}.dist-info/METADATA").decode())
        library_name = f"epcomm/_lib/libepcomm.so.{version.split('.')[0]}"
        library = archive.read(library_name) if library_name in names else b""
    if metadata["Version"] != version:
        problems.append(f"version {metadata['Version']}, the header's is {version}")
    requires = [r.replace(" ", "") for r in metadata.get_all("Requires-Dist") or []]
    if NCCL_REQUIREMENT not in requires:
        problems.append(f"Requires-Dist {requires} lacks {NCCL_REQUIREMENT}")
    package = ROOT / "bindings" / "python" / "epcomm"
    for source in sorted(p.name for p in package.iterdir() if p.suffix in (".py", ".typed")):
        if f"epcomm/{source}" not in names:
            problems.append(f"epcomm/{source} is not in the wheel (list it in bindings/python/wheel/meson.build)")
    glibc_minor = 17
    if not library:
        problems.append(f"{library_name} is not in the wheel")
    else:
        sections = elf_sections(library)
        sonames, paths = dynamic_strings(library, sections)
        if sonames != [os.path.basename(library_name)]:
            problems.append(f"{library_name}: SONAME {sonames}")
        absolute = [p for entry in paths for p in entry.split(":") if p.startswith("/")]
        if absolute:
            problems.append(f"{library_name}: absolute RUNPATH/RPATH {absolute}")
        entries = fatbin_entries(sections.get(".nv_fatbin", b""))
        sass = {arch for kind, arch in entries if kind == "sass"}
        ptx = {arch for kind, arch in entries if kind == "ptx"}
        if not WANTED_SASS <= sass or not ptx:
            problems.append(
                f"{library_name}: device code for sm {sorted(sass)}, PTX {sorted(ptx)}; wanted sm 90 and 100 and PTX"
            )
        print(f"check_wheel: {library_name}: {len(library)} bytes, SONAME {sonames[0] if sonames else None}, "
              f"RUNPATH {paths}, sm {sorted(sass)}, PTX {sorted(ptx)}")  # fmt: skip
        versions = re.findall(rb"GLIBC_2\.(\d+)", sections.get(".dynstr", b""))
        glibc_minor = max([glibc_minor] + [int(v) for v in versions])
    if problems:
        print("check_wheel: FAILED\n  " + "\n  ".join(problems))
        return 1
    tagged = wheel if "-py3-none-manylinux_" in wheel.name else retag(wheel, glibc_minor)
    installed = install_and_diagnose(tagged, version)
    if installed:
        print(f"check_wheel: FAILED\n  {installed}")
        return 1
    print(f"check_wheel: ok: {tagged} ({len(names)} files, version {version}, {NCCL_REQUIREMENT}, installs)")
    return 0


def install_and_diagnose(wheel: pathlib.Path, version: str) -> str:
    """pip-installs `wheel` into a new virtual environment and runs `python -m epcomm` there
    (outside the checkout, without EPCOMM_LIB); returns what went wrong, or ''."""
    with tempfile.TemporaryDirectory() as scratch:
        venv = pathlib.Path(scratch) / "venv"
        python = venv / "bin" / "python"
        env = {k: v for k, v in os.environ.items() if k not in ("EPCOMM_LIB", "PYTHONPATH")}
        steps = (
            [sys.executable, "-m", "venv", str(venv)],
            [str(python), "-m", "pip", "install", "-q", str(wheel.resolve())],
            [str(python), "-m", "epcomm"],
        )
        for step in steps:
            run = subprocess.run(step, cwd=scratch, env=env, capture_output=True, text=True)
            if run.returncode != 0:
                return f"{' '.join(step[1:3])} exited {run.returncode}: {(run.stdout + run.stderr).strip()[-2000:]}"
        report = run.stdout
        print("check_wheel: python -m epcomm in a new environment:\n  " + report.strip().replace("\n", "\n  "))
        if "(found: bundled)" not in report or not re.search(rf"^ABI\s+{re.escape(version)}$", report, re.M):
            return f"python -m epcomm did not report the bundled library at ABI {version}"
    return ""


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1]))
