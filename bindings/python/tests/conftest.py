# SPDX-License-Identifier: Apache-2.0
"""Shared set-up of the Python binding tests.

`meson test --suite bindings` runs them with the library, header and ABI snapshot of the
build in the environment (bindings/meson.build's bindings_env). Run by hand, they find the
package beside this folder and the library at build/capi/ of the repository.
"""

import json
import os
import pathlib
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGE_PARENT = REPO_ROOT / "bindings" / "python"

if str(PACKAGE_PARENT) not in sys.path:
    sys.path.insert(0, str(PACKAGE_PARENT))

_BUILT_LIBRARY = REPO_ROOT / "build" / "capi" / "libepcomm.so.2"
if "EPCOMM_LIB" not in os.environ and _BUILT_LIBRARY.exists():
    os.environ["EPCOMM_LIB"] = str(_BUILT_LIBRARY)


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def abi_snapshot() -> dict:
    """The ABI snapshot of the version these bindings were generated for."""
    from epcomm import _ffi

    path = pathlib.Path(os.environ.get("EPCOMM_ABI_JSON") or REPO_ROOT / "capi" / "abi.json")
    versions = json.loads(path.read_text())["versions"]
    if _ffi.HEADER_ABI_VERSION not in versions:
        pytest.fail(
            f"{path} has no snapshot of ABI {_ffi.HEADER_ABI_VERSION} (it has "
            f"{sorted(versions)}): regenerate the bindings or update the snapshot"
        )
    return versions[_ffi.HEADER_ABI_VERSION]


@pytest.fixture
def dead_group():
    """A Group whose EpcGroup* is zeroed memory (tests/fakes.py DeadObject)."""
    import epcomm
    from epcomm import _ffi
    from fakes import DeadObject

    memory = DeadObject(_ffi.EpcGroup)
    group = epcomm.Group(memory.pointer, None, epcomm.GroupConfig().to_struct())
    group._memory = memory  # noqa: SLF001 (keeps the fake alive with the group)
    yield group
    group._handle = None  # noqa: SLF001 (nothing real to destroy)


def dead_handle_of(make, group):
    """A generator for fixtures: make(pointer, group) over zeroed memory, yielded, then
    forgotten (nothing real to destroy)."""
    from epcomm import _ffi
    from fakes import DeadObject

    memory = DeadObject(_ffi.EpcHandle)
    handle = make(memory.pointer, group)
    handle._memory = memory  # noqa: SLF001
    yield handle
    handle._pointer = None  # noqa: SLF001
