#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A library of another ABI major must be a build error of epcomm-sys naming both versions.

Builds epcomm-sys (bindings/rust/cargo-offline.sh build) twice against a stand-in for an
epcomm 3.0.0 install and expects each build to fail with a message naming what was found
and the range the crate accepts:
  1. pkg-config: PKG_CONFIG_PATH holds only an epcomm.pc of Version 3.0.0;
  2. EPCOMM_LIB_DIR: a directory with libepcomm.so.3 and no libepcomm.so.2.
Usage: check_version_range.py CARGO_TARGET_DIR   (run from bindings/rust)
"""

import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent


def crate_range():
    """(major, minor) from epcomm-sys's version metadata, e.g. 0.2.0+2.0.0 -> (2, 0)."""
    for line in (HERE / "epcomm-sys" / "Cargo.toml").read_text().splitlines():
        if line.startswith("version = "):
            metadata = line.split('"')[1].split("+")[1]
            major, minor = metadata.split(".")[:2]
            return int(major), int(minor)
    sys.exit("no version in epcomm-sys/Cargo.toml")


def build(target_dir, env_changes):
    env = dict(os.environ)
    env.pop("EPCOMM_LIB_DIR", None)
    env.update(env_changes)
    env["CARGO_TARGET_DIR"] = target_dir
    run = subprocess.run(
        [str(HERE / "cargo-offline.sh"), "build", "-p", "epcomm-sys", "--manifest-path", str(HERE / "Cargo.toml")],
        env=env,
        capture_output=True,
        text=True,
    )
    return run.returncode, run.stdout + run.stderr


def main():
    target_dir = sys.argv[1] if len(sys.argv) > 1 else str(HERE / "target")
    major, minor = crate_range()
    other = major + 1
    wanted = f">= {major}.{minor}, < {major + 1}"
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        libdir = tmp / "lib"
        (libdir / "pkgconfig").mkdir(parents=True)
        (libdir / f"libepcomm.so.{other}").write_bytes(b"")
        (libdir / "pkgconfig" / "epcomm.pc").write_text(
            f"prefix={tmp}\nlibdir=${{prefix}}/lib\nincludedir=${{prefix}}/include\n\n"
            f"Name: epcomm\nDescription: a stand-in of another ABI major\nVersion: {other}.0.0\n"
            "Libs: -L${libdir} -lepcomm\nCflags: -I${includedir}\n"
        )
        cases = [
            ("pkg-config", {"PKG_CONFIG_PATH": str(libdir / "pkgconfig")}, [f"libepcomm {other}.0.0", wanted]),
            (
                "EPCOMM_LIB_DIR",
                {"EPCOMM_LIB_DIR": str(libdir)},
                [f"libepcomm.so.{other}", f"libepcomm.so.{major}", wanted],
            ),
        ]
        for name, env, words in cases:
            code, output = build(target_dir, env)
            missing = [word for word in words if word not in output]
            if code == 0 or missing:
                failures.append(f"{name}: exit status {code}, missing {missing} in:\n{output[-3000:]}")
            else:
                print(f"ok: {name} found epcomm {other}.x and the build failed naming {words}")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
