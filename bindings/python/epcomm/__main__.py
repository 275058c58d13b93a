# SPDX-License-Identifier: Apache-2.0
"""`python -m epcomm`: what this installation finds, and what is missing.

Prints the package, the library (where it was found: $EPCOMM_LIB, the wheel's bundled copy
or the system), its ABI, the NCCL it loaded (path and version), the GPUs the CUDA driver
reports and whether torch is installed. Exits 0 whatever is missing, saying what it is:
it is a diagnostic, not a test.
"""

import ctypes
import importlib.metadata
import importlib.util
import os
import platform
import sys
from typing import List, Optional, Tuple

from . import __version__
from ._library import find_library, load_library


def _line(name: str, value: str) -> None:
    print(f"{name:<10} {value}")


def _loaded_path(soname_prefix: str) -> Optional[str]:
    """The file of a loaded shared object whose name starts with `soname_prefix`."""
    try:
        with open("/proc/self/maps") as maps:
            for entry in maps:
                path = entry.split()[-1] if "/" in entry else ""
                if os.path.basename(path).startswith(soname_prefix):
                    return os.path.realpath(path)
    except OSError:
        pass
    return None


def _nccl() -> str:
    path = _loaded_path("libnccl.so")
    if path is None:
        return "MISSING: no libnccl.so.2 loaded (install nvidia-nccl-cu13>=2.28.9,<2.29)"
    try:
        version = ctypes.c_int(0)
        ctypes.CDLL(path).ncclGetVersion(ctypes.byref(version))
        code = version.value
        text = f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    except (OSError, AttributeError):
        text = "version unknown"
    return f"{text} ({path})"


def _gpus() -> Tuple[str, List[str]]:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "MISSING: no CUDA driver (libcuda.so.1 not found)", []
    if cuda.cuInit(0) != 0:
        return "MISSING: the CUDA driver found no usable GPU (cuInit failed)", []
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "MISSING: no GPU", []
    names = []
    for ordinal in range(count.value):
        device, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGet(ctypes.byref(device), ordinal)
        cuda.cuDeviceGetName(name, len(name), device)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device)  # COMPUTE_CAPABILITY_MAJOR
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)  # COMPUTE_CAPABILITY_MINOR
        names.append(f"{ordinal}: {name.value.decode(errors='replace')} (sm_{major.value}{minor.value})")
    return f"{count.value}", names


def _torch() -> str:
    if importlib.util.find_spec("torch") is None:
        return "MISSING: not installed (epcomm.torch needs it; pip install torch)"
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "installed (version unknown)"


def main() -> int:
    _line("epcomm", f"{__version__} ({os.path.dirname(os.path.abspath(__file__))})")
    _line("python", f"{platform.python_version()} ({sys.executable})")
    path, where = find_library()
    try:
        library = load_library()
        _line("library", f"{os.path.realpath(_loaded_path('libepcomm.so') or library.path)} (found: {where})")
        _line("ABI", str(library.version))
        _line("NCCL", _nccl())
    except (OSError, Exception) as error:  # noqa: BLE001 (a diagnostic reports every failure)
        _line("library", f"MISSING: {path} (found: {where}) cannot be loaded: {error}")
        _line("ABI", "unknown (no library)")
        _line("NCCL", _nccl())
    count, names = _gpus()
    _line("GPUs", count)
    for name in names:
        _line("", name)
    _line("torch", _torch())
    return 0


if __name__ == "__main__":
    sys.exit(main())
