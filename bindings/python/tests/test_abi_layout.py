# SPDX-License-Identifier: Apache-2.0
"""The generated ctypes declarations against the ABI snapshot (capi/abi.json or
$EPCOMM_ABI_JSON): every struct's size, every field's offset and size, every constant,
every function's arity, every typedef's size."""

import ctypes
import pathlib

import pytest

import epcomm
from epcomm import _ffi

STRUCT_NAMES = [s.__name__ for s in _ffi.STRUCTS]


def test_every_snapshot_struct_is_generated(abi_snapshot):
    assert sorted(STRUCT_NAMES) == sorted(abi_snapshot["structs"])


@pytest.mark.parametrize("name", STRUCT_NAMES)
def test_struct_size_and_alignment(abi_snapshot, name):
    struct = getattr(_ffi, name)
    expected = abi_snapshot["structs"][name]
    assert ctypes.sizeof(struct) == expected["size"], f"sizeof({name})"
    assert ctypes.alignment(struct) == expected["align"], f"alignof({name})"


@pytest.mark.parametrize("name", STRUCT_NAMES)
def test_field_offsets_and_sizes(abi_snapshot, name):
    struct = getattr(_ffi, name)
    expected = abi_snapshot["structs"][name]["fields"]
    generated = [field for field, _ in struct._fields_]
    assert sorted(generated) == sorted(expected), f"{name}: field names differ"
    by_offset = sorted(expected, key=lambda field: expected[field]["offset"])
    assert generated == by_offset, f"{name}: field order differs"
    for field in generated:
        descriptor = getattr(struct, field)
        assert descriptor.offset == expected[field]["offset"], f"offsetof({name}, {field})"
        assert descriptor.size == expected[field]["size"], f"sizeof({name}.{field})"


def test_constants(abi_snapshot):
    for name, value in abi_snapshot["constants"].items():
        assert getattr(_ffi, name) == value, name
    generated = {n for n, v in vars(_ffi).items() if n.startswith("EPC_") and isinstance(v, int)}
    assert generated == set(abi_snapshot["constants"])


def test_function_prototypes(abi_snapshot):
    functions = {f["name"]: f for f in abi_snapshot["functions"]}
    assert set(_ffi.PROTOTYPES) == set(functions)
    for name, (restype, argtypes) in _ffi.PROTOTYPES.items():
        assert len(argtypes) == len(functions[name]["params"]), name
        if functions[name]["return_type"] == "EpcStatus":
            assert restype is _ffi.EpcStatus, name


def test_pointer_parameters_are_pointers(abi_snapshot):
    for function in abi_snapshot["functions"]:
        _, argtypes = _ffi.PROTOTYPES[function["name"]]
        for c_type, ctype in zip(function["params"], argtypes):
            if c_type.endswith("*"):
                assert ctypes.sizeof(ctype) == ctypes.sizeof(ctypes.c_void_p), (function["name"], c_type)


def test_typedef_sizes(abi_snapshot):
    for name, typedef in abi_snapshot["typedefs"].items():
        generated = getattr(_ffi, name)
        if typedef["kind"] == "opaque":
            assert generated in _ffi.OPAQUE_TYPES
        else:
            assert ctypes.sizeof(generated) == typedef["size"], name


def test_exported_symbols_are_all_bound(abi_snapshot):
    cdll = epcomm.load_library().cdll
    for symbol in abi_snapshot["symbols"]:
        assert hasattr(cdll, symbol), symbol
        assert getattr(cdll, symbol).argtypes is not None or symbol not in _ffi.PROTOTYPES


def test_package_version_is_the_headers():
    # The wheel's version is Meson's project version, which meson.build reads from the
    # header with tools/header_version.py; __version__ comes from the generated constants.
    import subprocess
    import sys

    import epcomm

    root = pathlib.Path(__file__).resolve().parents[3]
    script = root / "tools" / "header_version.py"
    read = subprocess.run([sys.executable, str(script)], check=True, capture_output=True, text=True).stdout.strip()
    assert read == epcomm.__version__ == f"{_ffi.EPC_ABI_MAJOR}.{_ffi.EPC_ABI_MINOR}.{_ffi.EPC_ABI_PATCH}"
    pyproject = (root / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "\nversion =" not in pyproject
    assert "version: run_command('tools/header_version.py'" in (root / "meson.build").read_text()
